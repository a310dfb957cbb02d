// The monitoring pack against a real Prometheus (Debian's 2.42): it scrapes
// the meta ports of two (three with the Go binaries) real yurt-tunnel-server
// processes and a real agent every second and evaluates
// manifests/monitoring/rules.yaml as shipped (`for:` untouched: an alert
// counts once it is in ALERTS, pending or firing). The test drives traffic
// and failures, and checks that each alert it can make true locally appears,
// with the labels an operator reads:
//
// - YurtTunnelReplicaWithoutAgents: the second server has no agent;
// - YurtTunnelStalledConnections: a third server, with a short
//   --stalled-connection-timeout, carries the upstream Go agent (no
//   per-connection flow control; our agent always negotiates it) and a reader
//   that takes nothing from a firehose target (a subtest, skipped with
//   findKonnectivity's reason where the Go binaries are missing);
// - YurtTunnelCertificateExpiresSoon: the agent's certificate lasts 3 days;
// - YurtTunnelNodeWithoutAgent: a stand-in for kube-state-metrics serves the
//   kube_pod_info it would (edge-1 and edge-2 each have pods and an agent pod;
//   only edge-1's agent runs);
// - YurtTunnelDialFailures: dials to a closed port;
// - YurtTunnelPendingDialsNearLimit: dials the agent cannot finish, at
//   --max-pending-dials-per-agent;
// - YurtTunnelAgentFlapping: the agent's link reset again and again;
// - YurtTunnelSessionResumesFailing: the server killed and restarted while the
//   agent held a suspended session (lost_by_server).
//
// At the end every dashboard panel's query must return series.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readFile, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { freeLowPort } from '../../hack/ports.js';
import { localAgentFlags, localServerFlags } from '../../hack/local-tunnel.js';
import { findKonnectivity, goAgentArgs } from '../../hack/konnectivity.js';
import { AGENT_JOB, ALERT_RULES, SERVER_JOB, toYaml } from '../../hack/monitoring.js';
import { AGENT_COMMON_NAME, CA_CERT_FILE, CA_KEY_FILE, YURTTUNNEL_ORGANIZATION, writeAgentCertificate } from '../../pkg/certs/local-store.js';
import { issueCertificate } from '../../pkg/certs/pki.js';
import { startBlipRelay } from '../support/blip-relay.js';
import { harness, type Harness } from '../support/harness.js';
import { AGENT_BIN, SERVER_BIN, startProcess, type Proc } from '../support/processes.js';
import { prometheusSkipReason, startPrometheus, type TestPrometheus } from '../support/prometheus.js';
import { closedPort, connectVia, readExactly, startEchoServer, startFirehose, startHangingListener, tempDir, waitFor } from '../support/tunnel.js';
import { repoRoot } from '../support/upstream.js';

const PACK = join(repoRoot(), 'manifests/monitoring');
const RULES_BY_ALERT = new Map(ALERT_RULES.map((r) => [r.alert, r.expr]));
const MAX_PENDING = 4;
const GO_BINS = findKonnectivity();

interface ServerProc {
  proc: Proc;
  udsPath: string;
  metaPort: number;
  agentPort: number;
  start(): Promise<Proc>;
}

async function serverProcess(h: Harness, name: string, extra: string[] = []): Promise<ServerProc> {
  const dir = await tempDir(h, `yt-mon-${name}-`);
  const udsPath = join(dir, 'proxier.sock');
  const [agentPort, metaPort] = [await freeLowPort(), await freeLowPort()];
  const s: ServerProc = {
    proc: undefined as unknown as Proc,
    udsPath,
    metaPort,
    agentPort,
    async start() {
      const p = startProcess(h, SERVER_BIN, [
        ...localServerFlags({ certDir: join(dir, 'pki'), agentPort, udsPath }),
        '--meta-port',
        String(metaPort),
        '--startup-rehearsal=false',
        ...extra,
      ]);
      await p.waitForLine(/yurt-tunnel-server started/, 30_000);
      s.proc = p;
      return p;
    },
  };
  await s.start();
  return s;
}

/** An agent certificate from the server's local CA that expires in 3 days. */
async function shortLivedAgentCertificate(certDir: string, outDir: string): Promise<void> {
  await writeAgentCertificate({ certDir, nodeName: 'edge-1', outDir, nodeIPs: ['127.0.0.1'] });
  const ca = { cert: await readFile(join(certDir, CA_CERT_FILE), 'utf8'), key: await readFile(join(certDir, CA_KEY_FILE), 'utf8') };
  const pair = issueCertificate(ca, {
    commonName: AGENT_COMMON_NAME,
    organizations: [YURTTUNNEL_ORGANIZATION],
    dnsNames: ['edge-1'],
    ips: ['127.0.0.1'],
    usages: ['clientAuth'],
    validityDays: 3,
  });
  await writeFile(join(outDir, 'tls.crt'), pair.cert);
  await writeFile(join(outDir, 'tls.key'), pair.key, { mode: 0o600 });
}

/** kube-state-metrics' kube_pod_info for two edge nodes, each with an agent pod of our DaemonSet and a workload pod. */
async function standInKubeStateMetrics(h: Harness): Promise<number> {
  const lines = ['# HELP kube_pod_info Information about pod.', '# TYPE kube_pod_info gauge'];
  for (const node of ['edge-1', 'edge-2']) {
    lines.push(
      `kube_pod_info{namespace="kube-system",pod="${AGENT_JOB}-${node}",node="${node}",created_by_kind="DaemonSet",created_by_name="${AGENT_JOB}"} 1`,
      `kube_pod_info{namespace="default",pod="web-${node}",node="${node}",created_by_kind="ReplicaSet",created_by_name="web-5d9f"} 1`,
    );
  }
  const body = `${lines.join('\n')}\n`;
  const server = createServer((_req, res) => res.end(body));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  h.defer(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });
  return (server.address() as AddressInfo).port;
}

/** Waits (bounded) until `expr` returns a series that `accept` takes; returns them. */
async function untilSeries(prom: TestPrometheus, what: string, expr: string, accept: (m: Record<string, string>) => boolean = () => true, ms = 30_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const r = await prom.query(expr);
    if (r.some((s) => accept(s.metric))) return r;
    if (Date.now() > deadline) {
      // What the rule reads, for the failure message.
      const rule = RULES_BY_ALERT.get(/alertname="(\w+)"/.exec(expr)?.[1] ?? '');
      const inputs = rule === undefined ? '' : `; the rule's expression now: ${JSON.stringify(await prom.query(rule.replace(/ (>|>=|==|<) .*$/s, '')))}`;
      throw new Error(`${what}: no series from ${expr} within ${ms} ms; last: ${JSON.stringify(r)}${inputs}`);
    }
    await new Promise((res) => setTimeout(res, 250));
  }
}

async function untilAlert(prom: TestPrometheus, alertname: string, labels: Record<string, string> = {}, ms?: number): Promise<Record<string, string>> {
  const r = await untilSeries(prom, alertname, `ALERTS{alertname="${alertname}"}`, (m) => Object.entries(labels).every(([k, v]) => m[k] === v), ms);
  const alert = r.find((s) => Object.entries(labels).every(([k, v]) => s.metric[k] === v))!.metric;
  assert.match(alert.alertstate!, /^(pending|firing)$/);
  return alert;
}

/** A CONNECT through the proxier whose answer we do not wait for. */
function connectNoWait(h: Harness, udsPath: string, target: string): Socket {
  const s = connect(udsPath);
  s.on('error', () => {});
  s.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\nX-Tunnel-Proxy-Host: edge-1\r\n\r\n`);
  h.defer(() => s.destroy());
  return s;
}

test(
  'a real Prometheus evaluates the pack: each alert made true becomes pending or firing, every panel has series',
  { skip: prometheusSkipReason(['prometheus']), timeout: 240_000 },
  async (t) => {
    const h = harness(t);
    const echo = await startEchoServer(h);
    const hanging = await startHangingListener(h);
    const refused = await closedPort();
    // Server A carries the agent; B is a second replica that no agent reaches.
    const a = await serverProcess(h, 'a', [
      '--max-pending-dials-per-agent',
      String(MAX_PENDING),
      '--dial-timeout',
      '2m',
      '--resume-window',
      '10s',
      // Restarted, it is the same server to the agent: it answers the agent's claim with "new", not as another server.
      '--server-id',
      'server-a',
    ]);
    const b = await serverProcess(h, 'b');
    // Server C carries the upstream Go agent, which has no per-connection flow control: a stalled reader is closed there.
    let c: ServerProc | undefined;
    if (typeof GO_BINS !== 'string') {
      c = await serverProcess(h, 'c', ['--stalled-connection-timeout', '500ms', '--v', '2']);
      const goAgentDir = join(await tempDir(h, 'yt-mon-go-agent-'), 'agent');
      await writeAgentCertificate({ certDir: join(c.udsPath, '..', 'pki'), nodeName: 'edge-go', outDir: goAgentDir, nodeIPs: ['127.0.0.1'] });
      const goAgent = startProcess(
        h,
        GO_BINS.proxyAgent,
        goAgentArgs(goAgentDir, c.agentPort, 'edge-go', 'host=edge-go&ipv4=127.0.0.1', await freeLowPort(), await freeLowPort()),
        {},
        { node: false },
      );
      await goAgent.waitForLine(/"Start serving"/, 20_000);
      await c.proc.waitForLine(/agent connected agentID=edge-go/, 20_000);
    }
    const relay = await startBlipRelay(h, [a.agentPort]);
    const agentDir = join(await tempDir(h, 'yt-mon-agent-'), 'agent');
    const certDir = join(a.udsPath, '..', 'pki');
    await shortLivedAgentCertificate(certDir, agentDir);
    const agentMeta = await freeLowPort();
    const startAgent = async (): Promise<Proc> => {
      const p = startProcess(h, AGENT_BIN, [
        ...localAgentFlags({ nodeName: 'edge-1', serverPort: relay.port, agentDir }),
        '--meta-port',
        String(agentMeta),
        '--dial-timeout',
        '2m',
        '--sync-interval',
        '100ms',
        '--sync-interval-cap',
        '300ms',
        '--startup-rehearsal=false',
        '--v',
        '2',
      ]);
      await p.waitForLine(/connected to tunnel server/, 30_000);
      return p;
    };
    let agent = await startAgent();
    const ksm = await standInKubeStateMetrics(h);

    const rules = await readFile(join(PACK, 'rules.yaml'), 'utf8');
    const prom = await startPrometheus(
      h,
      toYaml({
        global: { scrape_interval: '1s', scrape_timeout: '1s', evaluation_interval: '1s' },
        rule_files: ['rules.yaml'],
        scrape_configs: [
          { job_name: SERVER_JOB, static_configs: [{ targets: [a, b, c].flatMap((s) => (s === undefined ? [] : [`127.0.0.1:${s.metaPort}`])) }] },
          { job_name: AGENT_JOB, static_configs: [{ targets: [`127.0.0.1:${agentMeta}`], labels: { node: 'edge-1' } }] },
          { job_name: 'kube-state-metrics', static_configs: [{ targets: [`127.0.0.1:${ksm}`] }] },
        ],
      }),
      { 'rules.yaml': rules },
    );

    // Traffic all along: a dial and a round trip through server A every 250 ms (bounded by the test's end).
    const traffic = new AbortController();
    // Paused while the hung dials below fill the per-agent limit: a dial of this loop in flight then would take one
    // of the slots and leave the pending count below the alert's 80 % once it finished (seen once in CI: 3 of 4).
    const loop = { paused: false, dialing: false };
    const trafficDone = (async () => {
      for (let i = 0; !traffic.signal.aborted && i < 2000; i++) {
        if (loop.paused) {
          await new Promise((r) => setTimeout(r, 250));
          continue;
        }
        loop.dialing = true;
        try {
          const c = await connectVia(a.udsPath, `127.0.0.1:${echo.port}`, { headers: { 'X-Tunnel-Proxy-Host': 'edge-1' } });
          // Server A restarts below: a write may meet a closed socket (EPIPE) after readExactly is done with it.
          c.socket.on('error', () => {});
          if (c.status === 200) {
            c.socket.write('ping'.repeat(256));
            await readExactly(c.socket, 1024, c.rest);
          }
          c.socket.destroy();
        } catch {
          // Server A restarts below: its socket is gone for a moment.
        } finally {
          loop.dialing = false;
        }
        await new Promise((r) => setTimeout(r, 250));
      }
    })();
    h.defer(async () => {
      traffic.abort();
      await trafficDone;
    });

    await untilSeries(prom, 'all targets up', 'count(up == 1) >= 4');

    // Phase 1: what holds from the start.
    assert.equal((await untilAlert(prom, 'YurtTunnelReplicaWithoutAgents', { instance: `127.0.0.1:${b.metaPort}` })).severity, 'critical');
    const cert = await untilAlert(prom, 'YurtTunnelCertificateExpiresSoon', { job: AGENT_JOB, role: 'agent_client' });
    assert.equal(cert.alertstate, 'firing');
    // The servers' own certificates (a year) are not alerted.
    assert.deepEqual(await prom.query(`ALERTS{alertname="YurtTunnelCertificateExpiresSoon",job="${SERVER_JOB}"}`), []);
    await untilAlert(prom, 'YurtTunnelNodeWithoutAgent', { node: 'edge-2' });
    assert.deepEqual(await prom.query('ALERTS{alertname="YurtTunnelNodeWithoutAgent",node="edge-1"}'), []);

    await t.test('YurtTunnelStalledConnections: a reader that stops behind the Go agent', { skip: typeof GO_BINS === 'string' ? GO_BINS : false }, async () => {
      assert.ok(c !== undefined);
      // A reader that takes nothing: its buffer fills, the Go agent's stream pauses for it, and server C closes it.
      const firehose = await startFirehose(h);
      const stalled = await connectVia(c.udsPath, `127.0.0.1:${firehose.port}`);
      assert.equal(stalled.status, 200, stalled.head);
      stalled.socket.pause();
      h.defer(() => stalled.socket.destroy());
      const stalls = await untilAlert(prom, 'YurtTunnelStalledConnections', { instance: `127.0.0.1:${c.metaPort}` });
      assert.equal(stalls.severity, 'warning');
      // The replica-without-agents condition still holds for B alone: C has its agent.
      assert.deepEqual(await prom.query(`ALERTS{alertname="YurtTunnelReplicaWithoutAgents",instance="127.0.0.1:${c.metaPort}"}`), []);
    });

    // Phase 2: dials that fail (a closed port), in two rounds a few scrapes apart so that rate() sees the counter grow.
    for (let round = 0; round < 2; round++) {
      for (let i = 0; i < 10; i++) {
        const c = await connectVia(a.udsPath, `127.0.0.1:${refused}`, { headers: { 'X-Tunnel-Proxy-Host': 'edge-1' } });
        assert.equal(c.status, 502, c.head);
        c.socket.destroy();
      }
      await new Promise((r) => setTimeout(r, 2500));
    }
    const failing = await untilAlert(prom, 'YurtTunnelDialFailures');
    assert.match(failing.reason!, /^YT_ERR_/);

    // Dials the agent cannot finish (a listener whose backlog is full), up to the server's limit.
    loop.paused = true;
    await waitFor('the traffic loop to pause', () => !loop.dialing);
    const hung = Array.from({ length: MAX_PENDING }, () => connectNoWait(h, a.udsPath, `127.0.0.1:${hanging}`));
    await untilAlert(prom, 'YurtTunnelPendingDialsNearLimit', { instance: `127.0.0.1:${a.metaPort}` });
    for (const s of hung) s.destroy();
    loop.paused = false;

    // Phase 3: the agent's link reset again and again; it comes back each time.
    for (let i = 0; i < 7; i++) {
      const links = (): number => agent.lines.filter((l) => /connected to tunnel server|link to tunnel server resumed/.test(l)).length;
      const before = links();
      await relay.blip('reset', 50);
      for (let tries = 0; links() === before; tries++) {
        assert.ok(tries < 200, 'the agent reconnects after a reset');
        await new Promise((r) => setTimeout(r, 50));
      }
      // One scrape between connects, so Prometheus sees each.
      await new Promise((r) => setTimeout(r, 1100));
    }
    await untilAlert(prom, 'YurtTunnelAgentFlapping', { node: 'edge-1' });

    // Phase 4: the agent killed (server A expires its session after the window), started again;
    // then server A killed and restarted within the agent's window: the agent's session is lost by the server.
    agent.kill('SIGKILL');
    await agent.exited;
    await untilSeries(prom, 'the server expired the session', 'yurttunnel_server_agent_sessions_expired_total{reason="window"}');
    agent = await startAgent();
    await new Promise((r) => setTimeout(r, 1500));
    a.proc.kill('SIGKILL');
    await a.proc.exited;
    await a.start();
    await agent.waitForLine(/lost_by_server/, 30_000);
    const resumes = await untilAlert(prom, 'YurtTunnelSessionResumesFailing', { job: AGENT_JOB, reason: 'lost_by_server' });
    assert.equal(resumes.node, 'edge-1');

    // Every dashboard panel's query returns series (and a number, for the latency quantiles).
    const dashboard = JSON.parse(await readFile(join(PACK, 'dashboard.json'), 'utf8')) as {
      panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
    };
    let evaluated = 0;
    for (const panel of dashboard.panels) {
      for (const target of panel.targets) {
        const r = await untilSeries(prom, panel.title, target.expr, () => true, 60_000);
        if (/dial_duration_seconds:p\d+/.test(target.expr)) {
          await untilSeries(prom, `${panel.title} is a number`, `${target.expr} >= 0`, () => true, 30_000);
        }
        assert.ok(r.length > 0);
        evaluated++;
      }
    }
    assert.ok(evaluated >= 10, `${evaluated} queries evaluated`);
  },
);
