// The issue 35.4 scenario with the real processes: an agent pointed at the
// server's secure master port (TLS without h2) or its insecure one (plain
// HTTP) says in its retry warning what it reached and which port agents use,
// with OpenSSL's reason kept.

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { localAgentFlags, localServerFlags } from '../../hack/local-tunnel.js';
import { harness } from '../support/harness.js';
import { AGENT_BIN, SERVER_BIN, runProcess, startProcess } from '../support/processes.js';
import { tempDir } from '../support/tunnel.js';

const LIMIT = { timeout: 60_000 };

test("an agent pointed at the server's master ports says so in its retry warning, and which port agents use", LIMIT, async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const server = startProcess(h, SERVER_BIN, [
    ...localServerFlags({ certDir: join(dir, 'pki'), udsPath: join(dir, 'proxier.sock') }),
    '--startup-rehearsal',
    'false',
  ]);
  const securePort = /address=127\.0\.0\.1:(\d+)/.exec(await server.waitForLine(/master server listening \(secure\)/))![1]!;
  const insecurePort = /address=127\.0\.0\.1:(\d+)/.exec(await server.waitForLine(/master server listening \(insecure\)/))![1]!;
  const agentDir = join(dir, 'agent');
  const issued = await runProcess(h, SERVER_BIN, ['issue-agent-cert', '--cert-dir', join(dir, 'pki'), '--node-name', 'edge-1', '--out', agentDir]);
  assert.equal(issued.code, 0, issued.output);

  const cases: Array<[string, RegExp]> = [
    [
      securePort,
      new RegExp(
        `could not connect to the tunnel server; will retry .*error="tunnel server 127\\.0\\.0\\.1:${securePort}: answered TLS without HTTP/2 \\(h2\\): ` +
          "that is likely the server's master port \\(--secure-port, 10263 by default\\); agents connect to the server's " +
          // --transport auto then tries a WebSocket too; its failure follows the hint.
          '--tunnel-agent-connect-port, 10262 by default \\(OpenSSL: tlsv1 alert no application protocol\\); over a WebSocket: [^"]+"',
      ),
    ],
    [
      insecurePort,
      new RegExp(
        `could not connect to the tunnel server; will retry .*error="tunnel server 127\\.0\\.0\\.1:${insecurePort}: answered without TLS \\(plain HTTP\\?\\): ` +
          '.*agents connect to the server\'s --tunnel-agent-connect-port, 10262 by default \\(OpenSSL: wrong version number\\)"',
      ),
    ],
  ];
  for (const [port, warning] of cases) {
    const agent = startProcess(h, AGENT_BIN, [...localAgentFlags({ nodeName: 'edge-1', serverPort: Number(port), agentDir }), '--startup-rehearsal', 'false']);
    await agent.waitForLine(warning);
    agent.kill('SIGKILL');
    await agent.exited;
  }
  server.kill('SIGTERM');
  await server.exited;
});
