// While a session waits to resume, the agent gives up a TCP connect after
// 1 s and dials again, and a dial under way that had no such bound gives way
// (client-set.ts, server-dial.ts). Server and agent run in a network
// namespace of their own (`agentdial-…`), on its loopback; iptables there
// drops the agent port both ways while a download runs. The agent takes the
// link for lost and dials into the dropped port; the drop stays 3.5 s past
// that first SYN, beyond Linux's SYN resends (1 s and 3 s after it; the next
// comes 7 s after it: kernels before 6.5, and later ones with
// net.ipv4.tcp_syn_linear_timeouts 0, as the namespace is set; their default
// resends the first four every second). Left to the kernel, the dial connects
// 3.5 s after the port is back (and a probe dial caught in the drop holds the resume up for
// its whole 30 s handshake timeout); with the short connect timeout a new
// dial's SYN goes out within 1.5 s of it. Each blip must resume within 2.5 s
// of the port coming back, on gRPC and on a WebSocket, and the download goes
// on byte-exact.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { issueAgentCertificate, localAgentFlags, localServerFlags } from '../../hack/local-tunnel.js';
import { harness } from '../support/harness.js';
import { commandSkipReason, NetworkNamespace, netnsSkipReason } from '../support/netns/index.js';
import { AGENT_BIN, SERVER_BIN, type Proc } from '../support/processes.js';
import { connectVia, tempDir, waitFor } from '../support/tunnel.js';

const AGENT_PORT = 10262;
const MiB = 1024 * 1024;
const BLIPS = 2;
/** How long the port stays dropped after the agent took the link for lost: between the kernel's SYN resends at 3 s and 7 s. */
const HOLD_MS = 3500;
/** Resumed within this long of the port coming back: well under the 3.5 s the kernel's resend at 7 s would take. */
const RESUMED_WITHIN_MS = 2500;

const skip = netnsSkipReason() ?? commandSkipReason('iptables', 'apt-get install iptables');

/** A target that sends each connection `argv[2]` random bytes, then prints how many and their SHA-256. */
const SOURCE = `
import { createHash, randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
const total = Number(process.argv[2]);
createServer((s) => {
  s.on('error', () => {});
  const hash = createHash('sha256');
  let sent = 0;
  const more = () => {
    while (sent < total) {
      const b = randomBytes(64 * 1024);
      hash.update(b);
      sent += b.length;
      if (!s.write(b)) return void s.once('drain', more);
    }
    s.end(() => console.log('sent ' + sent + ' ' + hash.digest('hex')));
  };
  more();
}).listen(0, '127.0.0.1', function () { console.log('port ' + this.address().port); });
`;

const DROPS = [
  ['INPUT', '-p', 'tcp', '--dport', String(AGENT_PORT), '-j', 'DROP'],
  ['OUTPUT', '-p', 'tcp', '--sport', String(AGENT_PORT), '-j', 'DROP'],
];

function count(p: Proc, re: RegExp): number {
  return p.lines.filter((l) => re.test(l)).length;
}

/**
 * `auto` reaches the server over gRPC, with a probe dial every second: one is under way, sitting on its
 * SYN, when the agent takes the link for lost, and must give way. Over a WebSocket, no probes.
 */
const CASES = [
  { transport: 'auto', over: 'grpc', probeInterval: '1s', label: 'gRPC, a probe dial caught in the drop' },
  { transport: 'websocket', over: 'websocket', probeInterval: '0', label: 'WebSocket' },
];

for (const { transport, over, probeInterval, label } of CASES) {
  test(`while a session waits to resume, its dials give up a dropped SYN early (${label})`, { skip, timeout: 120_000 }, async (t) => {
    const h = harness(t, { leakCheck: false });
    const dir = await tempDir(h, 'yt-agentdial-');
    const ns = await NetworkNamespace.create(h, 'agentdial');
    await ns.must('sh', ['-c', `f=/proc/sys/net/ipv4/tcp_syn_linear_timeouts; [ ! -e $f ] || echo 0 > $f`]);
    const certDir = join(dir, 'pki');
    const udsPath = join(dir, 'proxier.sock');
    const server = ns.startProcess(h, SERVER_BIN, [...localServerFlags({ certDir, agentPort: AGENT_PORT, udsPath }), '--startup-rehearsal', 'false']);
    await server.waitForLine(/yurt-tunnel-server started/, 60_000);
    const agentDir = join(dir, 'agent');
    await issueAgentCertificate(certDir, 'edge-1', agentDir);

    const total = 48 * MiB;
    await writeFile(join(dir, 'source.mjs'), SOURCE);
    const source = ns.startProcess(h, join(dir, 'source.mjs'), [String(total)]);
    const sourcePort = Number(/port (\d+)/.exec(await source.waitForLine(/^port \d+/))![1]);

    // The default resume window (10 s): the agent takes a dark link for lost within about half of it.
    // prettier-ignore
    const agent = ns.startProcess(h, AGENT_BIN, [
      ...localAgentFlags({ nodeName: 'edge-1', serverPort: AGENT_PORT, agentDir }),
      '--transport', transport, '--server-probe-interval', probeInterval, '--startup-rehearsal', 'false',
    ]);
    h.defer(() => {
      if (process.env.YT_DEBUG_LOGS) process.stderr.write(`agent:\n${agent.lines.join('\n')}\n`);
    });
    await agent.waitForLine(new RegExp(`connected to tunnel server .*transport=${over}`), 30_000);

    const resumedAfter: number[] = [];
    for (let blip = 1; blip <= BLIPS; blip++) {
      const dropped = count(agent, /link to tunnel server dropped/);
      const resumed = count(agent, /link to tunnel server resumed/);
      const res = await connectVia(udsPath, `127.0.0.1:${sourcePort}`);
      assert.equal(res.status, 200, res.head);
      const hash = createHash('sha256').update(res.rest);
      let bytes = res.rest.length;
      let end: string | undefined;
      // Reading stops at 8 MiB until the port is dropped, so that the download is still under way then.
      let paused = false;
      res.socket.on('data', (c: Buffer) => {
        hash.update(c);
        bytes += c.length;
        if (bytes >= 8 * MiB && !paused) {
          paused = true;
          res.socket.pause();
        }
      });
      res.socket.once('end', () => {
        end ??= 'end';
      });
      res.socket.once('error', (err: Error) => {
        end ??= err.message;
      });
      res.socket.resume();
      await waitFor(`8 MiB of download ${blip}`, () => paused || end !== undefined, 15_000);
      assert.equal(end, undefined, `download ${blip} is still under way at 8 MiB`);

      for (const rule of DROPS) await ns.must('iptables', ['-I', ...rule]);
      try {
        res.socket.resume();
        await waitFor(`the agent to take the link for lost (blip ${blip})`, () => count(agent, /link to tunnel server dropped/) > dropped, 15_000);
        await sleep(HOLD_MS);
      } finally {
        for (const rule of DROPS) await ns.must('iptables', ['-D', ...rule]);
      }
      const back = performance.now();
      await waitFor(`the session to resume (blip ${blip})`, () => count(agent, /link to tunnel server resumed/) > resumed, 15_000);
      resumedAfter.push(Math.round(performance.now() - back));

      await waitFor(`download ${blip} to end`, () => end !== undefined, 30_000);
      res.socket.destroy();
      assert.equal(end, 'end');
      const sent = await waitForNth(source, /^sent \d+ [0-9a-f]+$/, blip);
      assert.equal(`sent ${bytes} ${hash.digest('hex')}`, sent, `blip ${blip}: the download across it is byte-exact`);
    }
    console.log(`${over}: resumed ${resumedAfter.join(', ')} ms after the port came back`);
    assert.ok(
      resumedAfter.every((ms) => ms < RESUMED_WITHIN_MS),
      `each blip resumed within ${RESUMED_WITHIN_MS} ms of the port coming back (the kernel's SYN resend would take ~3500 ms): ${resumedAfter.join(', ')} ms`,
    );
    assert.equal(count(agent, /session with the tunnel server expired/), 0, 'no session expired');
  });
}

/** The `n`-th line (from 1) of `p` matching `re`, waiting up to 10 s for it. */
async function waitForNth(p: Proc, re: RegExp, n: number): Promise<string> {
  await waitFor(`line ${n} matching ${re}`, () => count(p, re) >= n, 10_000);
  return p.lines.filter((l) => re.test(l))[n - 1]!;
}
