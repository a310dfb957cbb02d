// Session resume (issue 18) seen from kubectl: a real kube-apiserver reaches
// the stand-in kubelet of edge-1 through its egress selector and our tunnel,
// with a relay between our agent and our server that blips for 3 s. `logs -f`
// and `exec -i` must not notice more than a pause.

import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, beforeEach, describe, test, type TestContext } from 'node:test';
import type { TunnelAgent } from '../../pkg/agent/app.js';
import { issueCertificate } from '../../pkg/certs/pki.js';
import type { TunnelServer } from '../../pkg/server/app.js';
import { startBlipRelay, type BlipKind, type BlipRelay } from '../support/blip-relay.js';
import { startClusterAgent, startClusterServer } from '../support/cluster.js';
import { autoApprove, controlPlaneSkipReason, putNode, putPod, startControlPlane, type ControlPlane, type EgressSelector } from '../support/envtest/index.js';
import { suiteHarness } from '../support/harness.js';
import { checkFollowLines, firstOutputAfter, runKubectl, stopKubectl, whileRunning } from '../support/kubectl-stream.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { StandinKubelet } from '../support/standin-kubelet/index.js';
import { waitFor } from '../support/tunnel.js';

const skip = controlPlaneSkipReason();
const RESUME_WINDOW_MS = 10_000;
const BLIP_MS = 3000;

describe('kubectl across a 3 s blip between agent and server (session resume)', { skip }, () => {
  const suite = suiteHarness();
  let cp: ControlPlane;
  let server: TunnelServer;
  let agent: TunnelAgent;
  let kubelet: StandinKubelet;
  let relay: BlipRelay;
  const serverLog = new MemoryLogger(2);
  const agentLog = new MemoryLogger(2);
  let dir: string;

  before(async () => {
    cp = await startControlPlane({ controllerManager: true });
    suite.defer(() => cp.stop());
    const approver = autoApprove(cp, 'yurttunnel-');
    suite.defer(() => approver.stop());
    dir = await mkdtemp(join(tmpdir(), 'yt-egress-resume-'));
    suite.defer(() => rm(dir, { recursive: true, force: true }));
    const serving = issueCertificate(cp.pki.ca, { commonName: 'edge-1', ips: ['127.0.0.1'], usages: ['serverAuth'] });
    kubelet = new StandinKubelet({ cert: serving.cert, key: serving.key, clientCA: cp.pki.ca.cert, followIntervalMs: 20 });
    await kubelet.start();
    suite.defer(() => kubelet.close());
    await putNode(cp, 'edge-1', { internalIP: '127.0.0.1', kubeletPort: kubelet.port, labels: { 'openyurt.io/is-edge-worker': 'true' } });
    await putPod(cp, 'default', 'p1', 'edge-1');
    server = await startClusterServer(suite, cp, dir, {
      log: serverLog,
      extra: { resumeWindowMs: RESUME_WINDOW_MS, egressSelector: { uds: join(dir, 'egress.sock'), mode: 'grpc' } },
    });
    relay = await startBlipRelay(suite, [server.agentEndpoint.address.port]);
    agent = await startClusterAgent(suite, cp, server, dir, 'edge-1', {
      tunnelServerAddr: `127.0.0.1:${relay.port}`,
      resumeWindowMs: RESUME_WINDOW_MS,
      logger: agentLog,
    });
    await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1, 20_000);
    assert.equal(server.tunnel.sessions.size, 1, 'the link negotiated session resume');
  });
  after(() => suite.close());

  /** A blip of `kind`; returns when the relay healed, and checks afterwards that the agent resumed rather than reconnected. */
  async function blip(t: TestContext, kind: BlipKind): Promise<{ healedAt: number; resumed: () => Promise<number> }> {
    const resumedBefore = serverLog.find('agent link resumed').length;
    await relay.blip(kind, BLIP_MS);
    const healedAt = performance.now();
    return {
      healedAt,
      resumed: async () => {
        await waitFor('the server to resume the session', () => serverLog.find('agent link resumed').length > resumedBefore, RESUME_WINDOW_MS);
        const at = serverLog.find('agent link resumed')[resumedBefore]!.at - healedAt;
        t.diagnostic(`${kind} blip: the server resumed the session ${Math.round(at)} ms after the relay healed`);
        assert.equal(server.tunnel.sessions.size, 1, 'one session, the same one');
        return at;
      },
    };
  }

  function logsFollow(mode: string, kind: BlipKind): void {
    test(`kubectl logs -f streams every line once, in order, across a 3 s ${kind} blip (${mode})`, { timeout: 90_000 }, async (t) => {
      const streamsBefore = kubelet.followStreams.length;
      const k = runKubectl(cp, ['logs', '-f', 'p1', '-c', 'c1']);
      try {
        await whileRunning(k, 'followed lines', () => /^follow 25$/m.test(k.out()), 20_000);
        const record = kubelet.followStreams[streamsBefore]!;
        assert.ok(agent.clients.connCount >= 1, 'the stream runs through the agent');
        const b = await blip(t, kind);
        const linesAtHeal = k.out().split('\n').length;
        // It keeps streaming: lines the kubelet writes well after the blip arrive, on the same kubelet stream.
        await whileRunning(k, 'lines after the blip', () => k.out().split('\n').length > linesAtHeal + 50, 20_000);
        await b.resumed();
        t.diagnostic(`${kind} blip: kubectl printed again ${Math.round(firstOutputAfter(k, b.healedAt)!)} ms after the relay healed`);
        assert.equal(kubelet.followStreams.length, streamsBefore + 1, 'no second log request reached the kubelet');
        assert.equal(record.endedAt, null, 'the kubelet stream never ended');
        await stopKubectl(k);
        const n = checkFollowLines(k.out());
        assert.ok(n <= record.linesWritten, `kubectl printed ${n} follow lines, the kubelet wrote ${record.linesWritten}`);
      } finally {
        await stopKubectl(k);
      }
    });
  }

  function execInteractive(mode: string, kind: BlipKind): void {
    test(`kubectl exec -i keeps its shell across a 3 s ${kind} blip: every echo once, in order, exit 0 (${mode})`, { timeout: 90_000 }, async (t) => {
      const execsBefore = kubelet.requests.filter((r) => r.target.startsWith('/exec/')).length;
      const k = runKubectl(cp, ['exec', '-i', 'p1', '-c', 'c1', '--', 'nl']);
      let sent = 0;
      const send = (): void => {
        sent++;
        k.child.stdin.write(`in ${sent}\n`);
      };
      const echoed = (): number => k.out().split('\n').length - 1;
      const timer = setInterval(send, 50);
      try {
        await whileRunning(k, 'echoes before the blip', () => echoed() >= 20, 20_000);
        assert.ok(agent.clients.connCount >= 1, 'the shell runs through the agent');
        const b = await blip(t, kind);
        const sentAtHeal = sent;
        await whileRunning(k, 'echoes of lines sent after the blip', () => echoed() >= sentAtHeal + 20, 20_000);
        await b.resumed();
        t.diagnostic(`${kind} blip: kubectl printed again ${Math.round(firstOutputAfter(k, b.healedAt)!)} ms after the relay healed`);
        clearInterval(timer);
        k.child.stdin.end();
        assert.equal(await k.exited, 0, k.stderr());
      } finally {
        clearInterval(timer);
        await stopKubectl(k);
      }
      const lines = k.out().split('\n');
      assert.equal(lines.pop(), '', 'the output ends with a whole line');
      assert.equal(lines.length, sent, `${sent} lines sent, ${lines.length} echoed`);
      const session = lines[0]!.split(' ')[0]!;
      for (let i = 0; i < lines.length; i++) {
        if (lines[i] !== `${session} ${i + 1} in ${i + 1}`)
          assert.fail(`echo ${i + 1} is ${JSON.stringify(lines[i])}: lost, doubled, reordered or another shell`);
      }
      assert.equal(kubelet.requests.filter((r) => r.target.startsWith('/exec/')).length, execsBefore + 1, 'one exec reached the kubelet');
    });
  }

  const modes: Array<[string, () => EgressSelector]> = [
    ['HTTPConnect', () => ({ mode: 'HTTPConnect', udsPath: join(dir, 'proxier.sock') })],
    ['GRPC', () => ({ mode: 'GRPC', udsPath: join(dir, 'egress.sock') })],
  ];
  for (const [name, selector] of modes) {
    describe(name, () => {
      before(() => cp.useEgressSelector(selector()));
      // Each test starts with edge-1 connected (after a failed test, the agent may still be reconnecting).
      beforeEach(() => waitFor('agent edge-1 to be connected', () => server.tunnel.registry.agentCount === 1 && agent.clients.connectedServers === 1, 60_000), {
        timeout: 90_000,
      });
      logsFollow(name, 'reset');
      logsFollow(name, 'silent');
      execInteractive(name, 'reset');
      execInteractive(name, 'silent');
    });
  }
});
