// The agent through real proxies from Debian (issue 37 item 1), in network
// namespaces this test makes (root only):
//
//   proxy-cloud  10.77.1.1 ── 10.77.1.2  proxy-mid  10.77.2.1 ── 10.77.2.2  proxy-edge
//   (the server)                          (squid :3128 and https :3129,      (the agent, and the
//                                          tinyproxy :8888, dante :1080;      echo target on its loopback)
//                                          no forwarding)
//
// The edge has no route to the cloud: only the proxies reach the server. For
// each proxy the agent joins (squid with Basic auth and tinyproxy by
// HTTPS_PROXY, squid's https_port by HTTPS_PROXY=https://... with
// --proxy-ca-file, so the agent's TLS runs inside TLS to squid, dante's
// SOCKS5 with a user and password by --proxy-url), 64 MiB
// cross the tunnel byte-exact, an agent claiming another node with edge-1's
// certificate is still refused, and a wrong password is one warning naming
// the proxy and its answer. squid's certificate, when the agent is not given
// its CA, is one warning naming the proxy. NO_PROXY sends the agent around the proxy over a
// direct link added for that case alone.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { chmod, writeFile } from 'node:fs/promises';
import { createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { suiteHarness } from '../support/harness.js';
import { NETNS_TOOL, NetworkNamespace, netnsSkipReason, run, vethPair } from '../support/netns/index.js';
import { AGENT_BIN, SERVER_BIN, type Proc } from '../support/processes.js';
import { connectVia, tempDir } from '../support/tunnel.js';
import { issueAgentCertificate, localAgentFlags, localServerFlags } from '../../hack/local-tunnel.js';
import { createCA, issueCertificate } from '../../pkg/certs/pki.js';

const SQUID_AUTH = '/usr/lib/squid/basic_ncsa_auth';

/** Why a binary is missing (one line), or undefined. */
function missing(bin: string, pkg: string): string | undefined {
  try {
    execFileSync('sh', ['-c', `command -v ${bin}`], { stdio: 'ignore' });
    return undefined;
  } catch {
    return `${bin} is not installed (apt-get install ${pkg})`;
  }
}

function skipReason(): string | undefined {
  return (
    netnsSkipReason() ??
    missing('squid', 'squid') ??
    missing(SQUID_AUTH, 'squid') ??
    missing('tinyproxy', 'tinyproxy') ??
    missing('danted', 'dante-server') ??
    missing('openssl', 'openssl') ??
    missing('useradd', 'passwd')
  );
}

const skip = skipReason();
const LIMIT = { timeout: 180_000 };
const SERVER_IP = '10.77.1.1';
const MID_EDGE_IP = '10.77.2.1';
const ECHO_PORT = 18_080;
const TRANSFER = 64 * 1024 * 1024;

describe('the agent through squid, tinyproxy and dante', { skip }, () => {
  const suite = suiteHarness();
  let dir: string;
  let cloud: NetworkNamespace;
  let mid: NetworkNamespace;
  let edge: NetworkNamespace;
  let server: Proc;
  let serverAddr: string;
  let udsPath: string;
  let agentDir: string;
  const socksUser = `ytproxy${randomBytes(3).toString('hex')}`;
  const password = randomBytes(9).toString('base64url');

  before(async () => {
    dir = await tempDir(suite, 'yt-proxies-');
    // squid's helper and tinyproxy run as the unprivileged users of their packages.
    await chmod(dir, 0o755);
    cloud = await NetworkNamespace.create(suite, 'proxy-cloud');
    mid = await NetworkNamespace.create(suite, 'proxy-mid');
    edge = await NetworkNamespace.create(suite, 'proxy-edge');
    await vethPair({ ns: cloud, name: 'c-mid', addresses: [`${SERVER_IP}/24`] }, { ns: mid, name: 'm-cloud', addresses: ['10.77.1.2/24'] });
    await vethPair({ ns: mid, name: 'm-edge', addresses: [`${MID_EDGE_IP}/24`] }, { ns: edge, name: 'e-mid', addresses: ['10.77.2.2/24'] });

    udsPath = join(dir, 'proxier.sock');
    server = cloud.startProcess(suite, SERVER_BIN, [
      ...localServerFlags({ certDir: join(dir, 'pki'), udsPath }),
      '--bind-address',
      SERVER_IP,
      '--cert-ips',
      SERVER_IP,
      '--startup-rehearsal',
      'false',
    ]);
    serverAddr = /address=(\S+)/.exec(await server.waitForLine(/listening for agents/, 60_000))![1]!;
    agentDir = join(dir, 'agent');
    await issueAgentCertificate(join(dir, 'pki'), 'edge-1', agentDir);

    // The agent's target: an echo server here, reached from the edge's loopback over a Unix socket.
    const echoPath = join(dir, 'echo.sock');
    const sockets = new Set<Socket>();
    const echo = createServer((s) => {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => s.destroy());
      s.pipe(s);
    });
    echo.listen(echoPath);
    await once(echo, 'listening');
    suite.defer(async () => {
      for (const s of sockets) s.destroy();
      await new Promise((r) => echo.close(r));
    });
    await edge.startProcess(suite, NETNS_TOOL, ['forward', `tcp:127.0.0.1:${ECHO_PORT}`, `unix:${echoPath}`]).waitForLine(/^ready$/);

    await startSquid();
    await startTinyproxy();
    await startDante();
  });
  after(() => suite.close());

  async function startSquid(): Promise<void> {
    // https_port's certificate, from a CA of its own that only --proxy-ca-file makes the agent trust.
    const ca = createCA('squid-test-ca');
    const serving = issueCertificate(ca, { commonName: 'proxy-mid', ips: [MID_EDGE_IP], usages: ['serverAuth'] });
    await writeFile(join(dir, 'squid-ca.crt'), ca.cert, { mode: 0o644 });
    await writeFile(join(dir, 'squid.crt'), serving.cert, { mode: 0o644 });
    // Read by squid's unprivileged user; a key made for this test alone.
    await writeFile(join(dir, 'squid.key'), serving.key, { mode: 0o644 });
    // `--`: a base64url password may begin with '-' (1 in 64), which openssl would take for an option.
    const htpasswd = await run('openssl', ['passwd', '-apr1', '--', password]);
    assert.equal(htpasswd.code, 0, htpasswd.stderr);
    await writeFile(join(dir, 'squid.passwd'), `edge:${htpasswd.stdout.trim()}\n`, { mode: 0o644 });
    const conf = [
      `http_port ${MID_EDGE_IP}:3128`,
      `https_port ${MID_EDGE_IP}:3129 tls-cert=${join(dir, 'squid.crt')} tls-key=${join(dir, 'squid.key')}`,
      `auth_param basic program ${SQUID_AUTH} ${join(dir, 'squid.passwd')}`,
      'auth_param basic realm yurt-tunnel-test',
      'acl authed proxy_auth REQUIRED',
      'http_access allow authed',
      'http_access deny all',
      'visible_hostname proxy-mid',
      `pid_filename ${join(dir, 'squid.pid')}`,
      'access_log none',
      'cache_log stdio:/dev/stderr',
      'cache deny all',
      'cache_mem 8 MB',
      'netdb_filename none',
      'shutdown_lifetime 0 seconds',
    ].join('\n');
    await writeFile(join(dir, 'squid.conf'), `${conf}\n`, { mode: 0o644 });
    const squid = mid.startProcess(suite, 'squid', ['-N', '-d', '1', '-f', join(dir, 'squid.conf')], {}, { node: false });
    await squid.waitForLine(/Accepting HTTP Socket connections/, 60_000);
    await squid.waitForLine(/Accepting HTTPS Socket connections/, 60_000);
  }

  async function startTinyproxy(): Promise<void> {
    const conf = [
      'User nobody',
      'Group nogroup',
      'Port 8888',
      `Listen ${MID_EDGE_IP}`,
      'Timeout 600',
      'Allow 10.77.2.0/24',
      `BasicAuth edge ${password}`,
      'LogLevel Info',
      'MaxClients 20',
    ].join('\n');
    await writeFile(join(dir, 'tinyproxy.conf'), `${conf}\n`, { mode: 0o644 });
    const tinyproxy = mid.startProcess(suite, 'tinyproxy', ['-d', '-c', join(dir, 'tinyproxy.conf')], {}, { node: false });
    await waitListening(tinyproxy, 8888);
  }

  async function startDante(): Promise<void> {
    // sockd's username method checks system users: one made for this test and removed after it.
    const added = await run('useradd', ['--no-create-home', '--shell', '/usr/sbin/nologin', '--system', socksUser]);
    assert.equal(added.code, 0, added.stderr);
    suite.defer(async () => {
      const removed = await run('userdel', [socksUser]);
      assert.equal(removed.code, 0, removed.stderr);
    });
    const set = await run('chpasswd', [], { input: `${socksUser}:${password}\n` });
    assert.equal(set.code, 0, set.stderr);
    const conf = [
      'logoutput: stderr',
      `internal: ${MID_EDGE_IP} port = 1080`,
      'external: m-cloud',
      'clientmethod: none',
      'socksmethod: username',
      'user.privileged: root',
      'user.unprivileged: nobody',
      'client pass {\n  from: 10.77.2.0/24 to: 0.0.0.0/0\n}',
      'socks pass {\n  from: 10.77.2.0/24 to: 0.0.0.0/0\n  command: connect\n}',
    ].join('\n');
    await writeFile(join(dir, 'danted.conf'), `${conf}\n`, { mode: 0o644 });
    const dante = mid.startProcess(suite, 'danted', ['-f', join(dir, 'danted.conf'), '-p', join(dir, 'danted.pid'), '-N', '1'], {}, { node: false });
    await waitListening(dante, 1080);
  }

  /** Until something in mid listens on MID_EDGE_IP:port (ss), or the proxy exits. */
  async function waitListening(proc: Proc, port: number): Promise<void> {
    for (let i = 0; i < 100; i++) {
      const ss = await mid.run('ss', ['-Hltn', `sport = :${port}`]);
      if (ss.stdout.includes(`${MID_EDGE_IP}:${port}`)) return;
      if (proc.child.exitCode !== null) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`nothing listens on ${MID_EDGE_IP}:${port}; output:\n${proc.lines.join('\n')}`);
  }

  /** An agent in the edge namespace; `nodeName` other than edge-1 claims another node with edge-1's certificate. */
  function startEdgeAgent(extra: string[], env: NodeJS.ProcessEnv, nodeName = 'edge-1'): Proc {
    const flags = localAgentFlags({ nodeName, serverPort: 0, agentDir }).map((f) => (f === '127.0.0.1:0' ? serverAddr : f));
    // The test's own environment must not leak a proxy setting into the agent.
    const clean = { HTTPS_PROXY: '', https_proxy: '', ALL_PROXY: '', all_proxy: '', NO_PROXY: '', no_proxy: '' };
    return edge.startProcess(suite, AGENT_BIN, [...flags, '--startup-rehearsal', 'false', ...extra], { ...clean, ...env });
  }

  async function stopAgent(agent: Proc): Promise<void> {
    agent.kill('SIGKILL');
    await agent.exited;
  }

  /** 64 MiB of random bytes to the edge's echo target through the tunnel, compared by sha256 with what comes back. */
  async function transfer(): Promise<void> {
    const c = await connectVia(udsPath, `127.0.0.1:${ECHO_PORT}`);
    assert.equal(c.status, 200, c.head);
    const sent = createHash('sha256');
    const received = createHash('sha256');
    let receivedBytes = 0;
    const done = new Promise<void>((resolve, reject) => {
      const onData = (chunk: Buffer): void => {
        received.update(chunk);
        receivedBytes += chunk.length;
        if (receivedBytes >= TRANSFER) resolve();
      };
      if (c.rest.length > 0) onData(c.rest);
      c.socket.on('data', onData);
      c.socket.once('error', reject);
      c.socket.once('close', () => (receivedBytes >= TRANSFER ? resolve() : reject(new Error(`closed after ${receivedBytes} bytes`))));
      c.socket.resume();
    });
    const chunk = 1024 * 1024;
    for (let i = 0; i < TRANSFER / chunk; i++) {
      const block = randomBytes(chunk);
      sent.update(block);
      if (!c.socket.write(block)) await once(c.socket, 'drain');
    }
    await done;
    c.socket.destroy();
    assert.equal(receivedBytes, TRANSFER);
    assert.equal(received.digest('hex'), sent.digest('hex'));
  }

  const proxies: { name: string; url: (pw: string) => string; by: 'HTTPS_PROXY' | '--proxy-url'; flags?: () => string[]; refusal: RegExp }[] = [
    {
      name: 'squid',
      url: (pw) => `http://edge:${pw}@${MID_EDGE_IP}:3128`,
      by: 'HTTPS_PROXY',
      refusal: /refused CONNECT to \S+: 407 Proxy Authentication Required/,
    },
    {
      name: "squid's https_port",
      url: (pw) => `https://edge:${pw}@${MID_EDGE_IP}:3129`,
      by: 'HTTPS_PROXY',
      flags: () => ['--proxy-ca-file', join(dir, 'squid-ca.crt')],
      refusal: /refused CONNECT to \S+: 407 Proxy Authentication Required/,
    },
    // tinyproxy answers a wrong BasicAuth with 401, not 407: the warning says what it said.
    { name: 'tinyproxy', url: (pw) => `http://edge:${pw}@${MID_EDGE_IP}:8888`, by: 'HTTPS_PROXY', refusal: /refused CONNECT to \S+: 401 Unauthorized/ },
    {
      name: 'dante',
      url: (pw) => `socks5://${socksUser}:${pw}@${MID_EDGE_IP}:1080`,
      by: '--proxy-url',
      refusal: /refused CONNECT to \S+: Socks5 Authentication failed/,
    },
  ];

  for (const p of proxies) {
    test(`through ${p.name} (${p.by}): joins, 64 MiB byte-exact, an impostor refused, a wrong password one clear warning`, LIMIT, async () => {
      const given = (pw: string): [string[], NodeJS.ProcessEnv] =>
        p.by === 'HTTPS_PROXY' ? [p.flags?.() ?? [], { HTTPS_PROXY: p.url(pw) }] : [['--proxy-url', p.url(pw), ...(p.flags?.() ?? [])], {}];
      const display = p.url('x').replace(/\/\/[^@]*@/, '//');

      const agent = startEdgeAgent(...given(password));
      await agent.waitForLine(/connected to tunnel server/, 60_000);
      await transfer();
      await stopAgent(agent);

      const impostor = startEdgeAgent(...given(password), 'edge-9');
      await server.waitForLine(/agent refused by the identity check.*edge-9/, 60_000);
      await stopAgent(impostor);
      assert.equal(impostor.lines.filter((l) => /connected to tunnel server/.test(l)).length, 0);

      const wrong = `not-${password}`;
      const refused = startEdgeAgent(...given(wrong));
      const warning = await refused.waitForLine(/could not connect to the tunnel server; will retry/, 60_000);
      await stopAgent(refused);
      assert.ok(warning.includes(`proxy ${display} (${p.by})`), warning);
      assert.match(warning, p.refusal);
      assert.doesNotMatch(warning, /TLS|SSL|certificate/i);
      assert.ok(!refused.lines.some((l) => l.includes(wrong)), 'the password never reaches the log');
    });
  }

  test("squid's https_port with a certificate the agent does not trust: one warning naming the proxy", LIMIT, async () => {
    const agent = startEdgeAgent([], { HTTPS_PROXY: `https://edge:${password}@${MID_EDGE_IP}:3129` });
    const warning = await agent.waitForLine(/could not connect to the tunnel server; will retry/, 60_000);
    await stopAgent(agent);
    assert.ok(warning.includes(`proxy https://${MID_EDGE_IP}:3129 (HTTPS_PROXY): its certificate is not trusted`), warning);
    assert.ok(warning.includes("give the agent the proxy's CA with --proxy-ca-file"), warning);
    const error = warning.slice(warning.indexOf('error='));
    assert.ok(!error.includes(serverAddr), `the error names the proxy, not the server: ${warning}`);
  });

  test('NO_PROXY sends the agent around the proxy, over a direct link', LIMIT, async () => {
    await vethPair({ ns: cloud, name: 'c-edge', addresses: ['10.77.3.1/24'] }, { ns: edge, name: 'e-cloud', addresses: ['10.77.3.2/24'] });
    await edge.ip('route', 'add', '10.77.1.0/24', 'via', '10.77.3.1');
    try {
      const agent = startEdgeAgent([], { HTTPS_PROXY: `http://edge:wrong@${MID_EDGE_IP}:3128`, NO_PROXY: 'example.com,10.77.1.0/24' });
      await agent.waitForLine(/connected to tunnel server/, 60_000);
      await transfer();
      await stopAgent(agent);
    } finally {
      await edge.ip('link', 'del', 'e-cloud');
    }
  });
});
