// Agents behind real load balancers (issue 37 item 2), in network namespaces:
// `ws-lb` holds the tunnel server (agent port 10262 of its own namespace),
// Debian's nginx terminating the agents' TLS on 443 and speaking HTTP/1.1 to
// the server (WebSocket, the client certificate forwarded in
// X-SSL-Client-Cert), and haproxy passing TLS through in TCP mode on 8443;
// `ws-edge` holds the agents and their targets, with a route to ws-lb's one
// address and nothing else. Through nginx `--transport auto` falls back to a
// WebSocket and joins, a download is byte-exact, a 3 s blip of the nginx
// path (iptables DROP in ws-lb) is survived by session resume; a forwarded
// certificate from the edge itself (outside --trusted-proxy-cidrs) is
// refused; through haproxy gRPC is used. The second test (namespaces
// `l7k-*`) puts the real kube-apiserver behind the same nginx path: kubectl
// logs -f survives the blip with every line once and in order, then exec
// works. The configurations are test/fixtures/l7/, which docs/operating.md
// shows.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { accessSync, constants } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { delimiter, join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { localServerFlags } from '../../hack/local-tunnel.js';
import { issueCertificate } from '../../pkg/certs/pki.js';
import { controlPlaneSkipReason, putNode, putPod, startControlPlane } from '../support/envtest/index.js';
import { harness, type Harness } from '../support/harness.js';
import { checkExec, checkFollowLines, firstOutputAfter, runKubectl, stopKubectl, whileRunning } from '../support/kubectl-stream.js';
import { NetworkNamespace, netnsSkipReason, vethPair } from '../support/netns/index.js';
import { AGENT_BIN, runProcess, SERVER_BIN, type Proc } from '../support/processes.js';
import { repoRoot } from '../support/upstream.js';
import { connectVia, tempDir, waitFor } from '../support/tunnel.js';

const LB_IP = '10.30.0.1';
const EDGE_IP = '10.30.0.2';
const AGENT_PORT = 10262;
const MiB = 1024 * 1024;
const KUBELET_MAIN = join(repoRoot(), 'dist/test/support/standin-kubelet/main.js');

function binary(name: string): string | undefined {
  for (const dir of [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/sbin']) {
    try {
      accessSync(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      // Not in this folder.
    }
  }
  return undefined;
}

const nginx = binary('nginx');
const haproxy = binary('haproxy');
const skip =
  netnsSkipReason() ??
  (nginx === undefined ? 'nginx is not installed (apt-get install nginx-light)' : undefined) ??
  (binary('iptables') === undefined ? 'iptables is not installed (apt-get install iptables)' : undefined);
const haproxySkip = haproxy === undefined ? 'haproxy is not installed (apt-get install haproxy)' : undefined;

/** `total` bytes, the same for every call: counter blocks hashed. */
function* payload(total: number): Generator<Buffer> {
  for (let i = 0, sent = 0; sent < total; i++) {
    const block = Buffer.alloc(64 * 1024, i % 251);
    block.writeUInt32BE(i, 0);
    sent += block.length;
    yield block;
  }
}

function payloadHash(total: number): string {
  const h = createHash('sha256');
  for (const b of payload(total)) h.update(b);
  return h.digest('hex');
}

/** A Node script in `dir`, run inside a namespace (its imports are absolute: the test's node_modules). */
async function script(dir: string, name: string, text: string): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, text);
  return path;
}

/** A target in the edge: each connection gets `total` bytes of payload(), then EOF. */
const SOURCE = `
import { createServer } from 'node:net';
const total = Number(process.argv[2]);
createServer((s) => {
  s.on('error', () => {});
  let i = 0, sent = 0;
  const go = () => {
    while (sent < total) {
      const b = Buffer.alloc(64 * 1024, i % 251);
      b.writeUInt32BE(i++, 0);
      sent += b.length;
      if (!s.write(b)) return void s.once('drain', go);
    }
    s.end();
  };
  go();
}).listen(0, '127.0.0.1', function () { console.log('port ' + this.address().port); });
`;

/** A WebSocket upgrade straight to the server's agent port, with a forwarded certificate: prints the answer. */
const FORGED = (wsModule: string): string => `
import { readFileSync } from 'node:fs';
import WebSocket from '${wsModule}';
const [url, ca, cert, key] = process.argv.slice(2);
const pem = readFileSync(cert, 'utf8');
const ws = new WebSocket(url, {
  ca: readFileSync(ca), cert: pem, key: readFileSync(key),
  headers: { agentid: 'edge-1', 'x-ssl-client-cert': encodeURIComponent(pem) },
});
ws.on('open', () => { console.log('answer opened'); ws.terminate(); });
ws.on('unexpected-response', (_req, res) => {
  console.log('answer ' + res.statusCode + ' ' + res.headers['grpc-status'] + ' ' + decodeURIComponent(String(res.headers['grpc-message'])));
  process.exit(0);
});
ws.on('error', (err) => console.log('answer error ' + err.message));
`;

async function filled(from: string, to: string, values: Record<string, string>): Promise<string> {
  let text = await readFile(from, 'utf8');
  for (const [name, value] of Object.entries(values)) text = text.replaceAll(`@${name}@`, value);
  await writeFile(to, text);
  return to;
}

/** Resolves once something accepts TCP on host:port inside `ns`. */
async function listening(ns: NetworkNamespace, host: string, port: number): Promise<void> {
  await waitFor(`${host}:${port} in ${ns.name}`, async () => (await ns.run('bash', ['-c', `exec 3<>/dev/tcp/${host}/${port}`])).code === 0, 10_000);
}

/** Downloads `total` bytes from the edge's source through the server's CONNECT proxier; `during` runs once 8 MiB arrived. */
async function download(udsPath: string, port: number, during?: () => Promise<void>): Promise<{ bytes: number; hash: string }> {
  const res = await connectVia(udsPath, `127.0.0.1:${port}`);
  assert.equal(res.status, 200, res.head);
  const hash = createHash('sha256').update(res.rest);
  let bytes = res.rest.length;
  let blip: Promise<void> | undefined;
  res.socket.on('data', (c: Buffer) => {
    hash.update(c);
    bytes += c.length;
    if (during !== undefined && blip === undefined && bytes >= 8 * MiB) blip = during();
  });
  res.socket.resume();
  await new Promise((resolve, reject) => res.socket.once('end', resolve).once('error', reject));
  await blip;
  res.socket.destroy();
  return { bytes, hash: hash.digest('hex') };
}

function agentArgs(agentDir: string, node: string, address: string, extra: string[] = []): string[] {
  // prettier-ignore
  return [
    '--node-name', node, '--node-ip', '127.0.0.1', '--tunnelserver-addr', address, '--meta-port', '0',
    '--ca-file', join(agentDir, 'ca.crt'), '--cert-file', join(agentDir, 'tls.crt'), '--key-file', join(agentDir, 'tls.key'),
    '--startup-rehearsal', 'false', ...extra,
  ];
}

async function issue(h: Harness, certDir: string, node: string, out: string): Promise<void> {
  const r = await runProcess(h, SERVER_BIN, ['issue-agent-cert', '--cert-dir', certDir, '--node-name', node, '--node-ip', '127.0.0.1', '--out', out]);
  assert.equal(r.code, 0, r.output);
}

interface NginxPath {
  lb: NetworkNamespace;
  edge: NetworkNamespace;
  /** The tunnel server in `lb`, its agent port on every address there. */
  server: Proc;
  certDir: string;
  /** The server's CONNECT proxier (the file system is shared across network namespaces). */
  udsPath: string;
}

/**
 * Namespaces `<prefix>-lb` (the server, and nginx in front of it on LB_IP:443)
 * and `<prefix>-edge` (a route to LB_IP and nothing else); the server's
 * files in `dir`. Up when this resolves.
 */
async function nginxPath(h: Harness, prefix: string, dir: string): Promise<NginxPath> {
  const lb = await NetworkNamespace.create(h, `${prefix}-lb`);
  const edge = await NetworkNamespace.create(h, `${prefix}-edge`);
  await vethPair({ ns: lb, name: 'to-edge', addresses: [`${LB_IP}/30`] }, { ns: edge, name: 'to-lb', addresses: [`${EDGE_IP}/30`] });

  const certDir = join(dir, 'pki');
  const udsPath = join(dir, 'proxier.sock');
  const serverArgs = localServerFlags({ certDir, agentPort: AGENT_PORT, udsPath });
  // nginx connects from the lb namespace's loopback: the only peer whose forwarded certificates are believed.
  const server: Proc = lb.startProcess(h, SERVER_BIN, [
    ...serverArgs.map((a) => (a === '127.0.0.1' ? '0.0.0.0' : a)),
    '--cert-ips',
    LB_IP,
    '--trusted-proxy-cidrs',
    '127.0.0.1/32',
    '--startup-rehearsal',
    'false',
  ]);
  h.defer(() => {
    if (process.env.YT_DEBUG_LOGS) process.stderr.write(`server:\n${server.lines.join('\n')}\n`);
  });
  await server.waitForLine(/yurt-tunnel-server started/, 60_000);

  const conf = await filled(join(repoRoot(), 'test/fixtures/l7/nginx.conf'), join(dir, 'nginx.conf'), {
    DIR: dir,
    LISTEN: `${LB_IP}:443`,
    CERT: join(certDir, 'tunnel-server.crt'),
    KEY: join(certDir, 'tunnel-server.key'),
    CA: join(certDir, 'ca.crt'),
    UPSTREAM: `127.0.0.1:${AGENT_PORT}`,
    // nginx matches the name against DNS SANs only: the local certificate's localhost.
    UPSTREAM_NAME: 'localhost',
  });
  // One process (no master and workers): stopping it leaves no orphaned worker holding the test's pipes open.
  const nginxProc = lb.startProcess(h, nginx!, ['-p', dir, '-c', conf, '-g', 'daemon off; master_process off;'], {}, { node: false });
  h.defer(() => {
    if (process.env.YT_DEBUG_LOGS) process.stderr.write(`nginx:\n${nginxProc.lines.join('\n')}\n`);
  });
  await listening(lb, LB_IP, 443);
  return { lb, edge, server, certDir, udsPath };
}

/**
 * A blip of the nginx path: its port drops everything both ways for `ms`,
 * then heals. The agent's liveness watch (a quarter of its resume window)
 * takes the link for lost; it comes back through nginx once the path heals
 * and resumes its session.
 */
async function blipNginxPath(lb: NetworkNamespace, ms: number): Promise<void> {
  const drops = [
    ['INPUT', '-p', 'tcp', '--dport', '443', '-j', 'DROP'],
    ['OUTPUT', '-p', 'tcp', '--sport', '443', '-j', 'DROP'],
  ];
  for (const rule of drops) await lb.must('iptables', ['-I', ...rule]);
  await sleep(ms);
  for (const rule of drops) await lb.must('iptables', ['-D', ...rule]);
}

test('agents behind nginx (TLS terminated, WebSocket) and haproxy (TLS passed through, gRPC)', { skip: skip ?? haproxySkip, timeout: 240_000 }, async (t) => {
  const h = harness(t, { leakCheck: false });
  const dir = await tempDir(h, 'ws-l7-');
  const { lb, edge, server, certDir, udsPath } = await nginxPath(h, 'ws', dir);
  const cfg = await filled(join(repoRoot(), 'test/fixtures/l7/haproxy.cfg'), join(dir, 'haproxy.cfg'), {
    LISTEN: `${LB_IP}:8443`,
    UPSTREAM: `127.0.0.1:${AGENT_PORT}`,
  });
  lb.startProcess(h, haproxy!, ['-db', '-f', cfg], {}, { node: false });
  await listening(lb, LB_IP, 8443);

  const agent1Dir = join(dir, 'agent-1');
  const agent2Dir = join(dir, 'agent-2');
  await issue(h, certDir, 'edge-1', agent1Dir);
  await issue(h, certDir, 'edge-2', agent2Dir);
  const source = edge.startProcess(h, await script(dir, 'source.mjs', SOURCE), [String(32 * MiB)]);
  const sourcePort = Number(/port (\d+)/.exec(await source.waitForLine(/^port \d+/))![1]);

  // Through nginx: gRPC is refused on the way (nginx offers no h2), the agent falls back to a WebSocket and says so.
  const agent1 = edge.startProcess(h, AGENT_BIN, agentArgs(agent1Dir, 'edge-1', `${LB_IP}:443`, ['--transport', 'auto', '--resume-window', '4s']));
  h.defer(() => {
    if (process.env.YT_DEBUG_LOGS) process.stderr.write(`agent-1:\n${agent1.lines.join('\n')}\n`);
  });
  await agent1.waitForLine(/connected to tunnel server .*transport=websocket/, 30_000);
  await agent1.waitForLine(/the tunnel server is reached over a WebSocket from now on/);

  const expected = payloadHash(32 * MiB);
  const plain = await download(udsPath, sourcePort);
  assert.deepEqual(plain, { bytes: 32 * MiB, hash: expected }, 'a download through nginx is byte-exact');

  // A 3 s blip of the nginx path, survived by session resume: the download goes on, nothing lost.
  const blipped = await download(udsPath, sourcePort, () => blipNginxPath(lb, 3000));
  assert.deepEqual(blipped, { bytes: 32 * MiB, hash: expected }, 'a download across the blip is byte-exact');
  await agent1.waitForLine(/link to tunnel server resumed/, 20_000);

  // Straight from the edge to the agent port (not a trusted proxy), a forwarded certificate is refused.
  const forged = edge.startProcess(h, await script(dir, 'forged.mjs', FORGED(join(repoRoot(), 'node_modules/ws/wrapper.mjs'))), [
    `wss://${LB_IP}:${AGENT_PORT}/`,
    join(agent1Dir, 'ca.crt'),
    join(agent1Dir, 'tls.crt'),
    join(agent1Dir, 'tls.key'),
  ]);
  const answer = await forged.waitForLine(/^answer /, 15_000);
  assert.match(
    answer,
    /^answer 403 7 a client certificate forwarded in x-ssl-client-cert is believed only from --trusted-proxy-cidrs, and 10\.30\.0\.2:\d+ is not among them$/,
  );
  await server.waitForLine(/agent call rejected .*trusted-proxy-cidrs/);

  // Through haproxy in TCP mode, TLS end to end: gRPC.
  const agent2 = edge.startProcess(h, AGENT_BIN, agentArgs(agent2Dir, 'edge-2', `${LB_IP}:8443`, ['--transport', 'auto']));
  await agent2.waitForLine(/connected to tunnel server .*transport=grpc/, 30_000);
  assert.ok(!agent2.lines.some((l) => /WebSocket/.test(l)), agent2.lines.join('\n'));
});

// Issue 37's kubectl through nginx: kube-apiserver's egress selector (HTTPConnect on the server's proxier socket)
// reaches the stand-in kubelet of edge-1, inside the edge namespace, only through the agent, whose only way to the
// server is nginx (auto falls back to a WebSocket; the server believes the certificate nginx forwards).
test(
  'kubectl logs -f and exec through nginx with the real kube-apiserver; logs -f across a 3 s blip of the nginx path',
  { skip: skip ?? controlPlaneSkipReason(), timeout: 120_000 },
  async (t) => {
    const h = harness(t, { leakCheck: false });
    const dir = await tempDir(h, 'l7k-');
    const { lb, edge, server, certDir, udsPath } = await nginxPath(h, 'l7k', dir);
    const cp = await startControlPlane({ egressSelector: { mode: 'HTTPConnect', udsPath } });
    h.defer(() => cp.stop());

    const serving = issueCertificate(cp.pki.ca, { commonName: 'edge-1', ips: ['127.0.0.1'], usages: ['serverAuth'] });
    const kubeletConfig = join(dir, 'kubelet.json');
    await writeFile(kubeletConfig, JSON.stringify({ cert: serving.cert, key: serving.key, clientCA: cp.pki.ca.cert }));
    const kubeletPort = Number(/^ready (\d+)$/.exec(await edge.startProcess(h, KUBELET_MAIN, [kubeletConfig]).waitForLine(/^ready \d+$/))![1]);
    await putNode(cp, 'edge-1', { internalIP: '127.0.0.1', kubeletPort });
    await putPod(cp, 'default', 'p1', 'edge-1');

    const agentDir = join(dir, 'agent');
    await issue(h, certDir, 'edge-1', agentDir);
    const agent = edge.startProcess(h, AGENT_BIN, agentArgs(agentDir, 'edge-1', `${LB_IP}:443`, ['--transport', 'auto', '--resume-window', '4s']));
    h.defer(() => {
      if (process.env.YT_DEBUG_LOGS) process.stderr.write(`agent:\n${agent.lines.join('\n')}\n`);
    });
    await agent.waitForLine(/connected to tunnel server .*transport=websocket/, 30_000);
    // Its peer is nginx (no client certificate of its own): edge-1 is who the forwarded certificate says.
    await server.waitForLine(/agent connected.*agentID=edge-1.*remoteAddress=127\.0\.0\.1\b/);

    const healthz = await cp.kubectl(['get', '--raw', '/api/v1/nodes/edge-1/proxy/healthz']);
    assert.equal(healthz.code, 0, healthz.stderr);
    assert.equal(healthz.stdout, 'ok');

    // logs -f across the blip: the agent takes the link for lost, comes back through nginx and resumes its
    // session; kubectl sees a pause, then every line once, in order, on the same kubelet stream.
    const k = runKubectl(cp, ['logs', '-f', 'p1', '-c', 'c1']);
    try {
      await whileRunning(k, 'followed lines', () => /^follow 25$/m.test(k.out()), 20_000);
      await blipNginxPath(lb, 3000);
      const healedAt = performance.now();
      const linesAtHeal = k.out().split('\n').length;
      await agent.waitForLine(/link to tunnel server resumed/, 10_000);
      await server.waitForLine(/agent link resumed.*agentID=edge-1/, 10_000);
      // It keeps streaming: what the blip held back comes at once on resume, and lines the kubelet writes a
      // second later still arrive, on the same stream.
      const resumedAt = performance.now();
      await whileRunning(
        k,
        'lines after the blip',
        () => k.out().split('\n').length > linesAtHeal + 50 && k.pieces.some((p) => p.at > resumedAt + 1000),
        20_000,
      );
      t.diagnostic(`kubectl printed again ${Math.round(firstOutputAfter(k, healedAt)!)} ms after the path healed`);
      await stopKubectl(k);
      const n = checkFollowLines(k.out());
      assert.ok(n > 75, `${n} follow lines`);
    } finally {
      await stopKubectl(k);
    }

    // New streams over the resumed link: exec, with and without stdin.
    await checkExec(cp, ['hello', 'through', 'nginx'], 'stdin through nginx');
  },
);
