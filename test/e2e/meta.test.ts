// The meta servers of a real server and agent: health and readiness as links
// come and go, metrics that move by exactly what a test sends, the debug
// listings and the `agents` status command, profiles, and bad requests.

import assert from 'node:assert/strict';
import { metaGet } from '../support/meta-get.js';
import { connect } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { writeAgentCertificate } from '../../pkg/certs/local-store.js';
import { TunnelServer } from '../../pkg/server/app.js';
import { startTestAgent } from '../support/cluster.js';
import { harness, type Harness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { runProcess, SERVER_BIN } from '../support/processes.js';
import { testServerOptions } from '../support/server-options.js';
import { closedPort, connectVia, readExactly, startEchoServer, tempDir, waitFor } from '../support/tunnel.js';

/** One sample's value from Prometheus text, 0 when absent. */
function sample(text: string, name: string, labels = ''): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `) || (labels === '' && l.startsWith(`${name} `)));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

async function startPair(h: Harness, opts: { profiling?: boolean } = {}) {
  const dir = await tempDir(h);
  const log = new MemoryLogger(2);
  const server = await TunnelServer.start(testServerOptions(dir, { metaPort: 0, enableProfiling: opts.profiling === true, logger: log }));
  h.defer(() => server.stop());
  const agentDir = join(dir, 'agent');
  await writeAgentCertificate({ certDir: join(dir, 'server-pki'), nodeName: 'edge-1', outDir: agentDir, nodeIPs: ['127.0.0.1'] });
  const agent = await startTestAgent(h, server, { nodeName: 'edge-1', certDir: agentDir, metaPort: 0 });
  await waitFor('edge-1 to register', () => server.tunnel.registry.agentCount === 1);
  return { dir, log, server, agent, serverMeta: server.meta!.address.port, agentMeta: agent.meta!.address.port };
}

test('healthz and readyz: the agent is ready only while it holds a server link; verbose lists each check', async (t) => {
  const h = harness(t);
  const { server, agent, serverMeta, agentMeta } = await startPair(h);
  assert.deepEqual(await metaGet(serverMeta, '/healthz'), { status: 200, body: 'ok' });
  assert.deepEqual(await metaGet(serverMeta, '/readyz'), { status: 200, body: 'ok' });
  const verbose = await metaGet(serverMeta, '/readyz?verbose');
  assert.equal(verbose.status, 200);
  assert.match(verbose.body, /^\[\+\]listeners ok\n\[\+\]certificates ok\n\[\+\]shutdown ok\nreadyz check passed\n$/);
  await waitFor('the agent to hold its server link', () => agent.clients.connectedServers === 1);
  assert.deepEqual(await metaGet(agentMeta, '/readyz'), { status: 200, body: 'ok' });
  await server.stop();
  await waitFor('the agent to lose its server link', () => agent.clients.connectedServers === 0);
  const agentReady = await metaGet(agentMeta, '/readyz?verbose');
  assert.equal(agentReady.status, 503);
  assert.match(agentReady.body, /\[-\]server-link failed: no link to a tunnel server at 127\.0\.0\.1:\d+ yet/);
  assert.deepEqual(await metaGet(agentMeta, '/healthz'), { status: 200, body: 'ok' });
});

test('metrics move by exactly the dials and bytes sent; debug listings and the agents command show the agent and its connections', async (t) => {
  const h = harness(t);
  const { dir, log, agent, serverMeta, agentMeta } = await startPair(h);
  const echo = await startEchoServer(h);
  const before = (await metaGet(serverMeta, '/metrics')).body;
  const agentBefore = (await metaGet(agentMeta, '/metrics')).body;
  const payloads = ['a'.repeat(1000), 'b'.repeat(2500), 'c'.repeat(77)];
  for (const p of payloads) {
    const c = await connectVia(join(dir, 'proxier.sock'), `127.0.0.1:${echo.port}`);
    c.socket.write(p);
    assert.equal((await readExactly(c.socket, p.length, c.rest)).toString(), p);
    c.socket.destroy();
  }
  const refused = await connectVia(join(dir, 'proxier.sock'), `127.0.0.1:${await closedPort()}`);
  assert.equal(refused.status, 502);
  // An open connection for the listings.
  const open = await connectVia(join(dir, 'proxier.sock'), `127.0.0.1:${echo.port}`);
  h.defer(() => open.socket.destroy());
  await waitFor('the three to close', () => echo.sockets.size === 1, 5000);
  // Each side counts a connection when its end of the tunnel has closed, a little after the target sees it.
  await waitFor('the server to log the three that ended', () => log.records.filter((r) => r.message === 'connection ended').length === 3);
  await waitFor('the agent to hold only the open connection', () => agent.clients.connCount === 1);

  const after = (await metaGet(serverMeta, '/metrics')).body;
  const delta = (name: string, labels = ''): number => sample(after, name, labels) - sample(before, name, labels);
  const sent = payloads.reduce((n, p) => n + p.length, 0);
  assert.equal(delta('konnectivity_network_proxy_server_dial_duration_seconds_count'), 4);
  assert.equal(delta('yurttunnel_server_tunnelled_bytes_total', '{direction="to_agent"}'), sent);
  assert.equal(delta('yurttunnel_server_tunnelled_bytes_total', '{direction="from_agent"}'), sent);
  assert.equal(delta('yurttunnel_server_connections_closed_total', '{reason="closed"}'), 3);
  assert.equal(delta('yurttunnel_server_dial_failures_total', '{reason="YT_ERR_DIAL_FAILED"}'), 1);
  assert.equal(delta('konnectivity_network_proxy_server_dial_failure_count', '{reason="error_response"}'), 1);
  assert.equal(sample(after, 'konnectivity_network_proxy_server_ready_backend_connections'), 1);
  assert.equal(sample(after, 'konnectivity_network_proxy_server_established_connections'), 1);
  assert.equal(delta('konnectivity_network_proxy_server_stream_packets_total', '{packet_type="DIAL_REQ",segment="to_agent"}'), 5);
  assert.equal(delta('konnectivity_network_proxy_server_stream_packets_total', '{packet_type="DIAL_RSP",segment="from_agent"}'), 5);
  assert.doesNotMatch(after, /edge-1|127\.0\.0\.1/, 'no node name or address in a label');
  for (const reason of ['stream_limit', 'connect_rate', 'unread_control']) {
    assert.match(after, new RegExp(`^yurttunnel_server_agent_refusals_total\\{reason="${reason}"\\} 0$`, 'm'));
  }
  // One access line per connection that ended: agent, destination, bytes each way, duration, how it ended.
  const access = log.records.filter((r) => r.message === 'connection ended');
  assert.equal(access.length, 3);
  assert.deepEqual(
    access.map((r) => [r.fields.agentID, r.fields.dialAddress, r.fields.bytesToAgent, r.fields.bytesFromAgent, r.fields.ended]),
    payloads.map((p) => ['edge-1', `127.0.0.1:${echo.port}`, p.length, p.length, 'closed']),
  );
  assert.ok(access.every((r) => typeof r.fields.durationMs === 'number'));

  const agentAfter = (await metaGet(agentMeta, '/metrics')).body;
  const agentDelta = (name: string, labels = ''): number => sample(agentAfter, name, labels) - sample(agentBefore, name, labels);
  assert.equal(agentDelta('konnectivity_network_proxy_agent_dial_duration_seconds_count'), 4);
  assert.equal(agentDelta('konnectivity_network_proxy_agent_endpoint_dial_failure_total', '{reason="refused"}'), 1);
  assert.equal(sample(agentAfter, 'konnectivity_network_proxy_agent_open_server_connections'), 1);
  assert.equal(sample(agentAfter, 'konnectivity_network_proxy_agent_open_endpoint_connections'), 1);

  const agents = JSON.parse((await metaGet(serverMeta, '/debug/agents')).body) as Array<Record<string, unknown>>;
  assert.equal(agents.length, 1);
  assert.equal(agents[0]!.agentID, 'edge-1');
  assert.deepEqual((agents[0]!.identifiers as { ipv4: string[] }).ipv4, ['127.0.0.1']);
  assert.equal(agents[0]!.openConnections, 1);
  // Bytes over the link's life: the three that ended count, not only the open one (which has sent nothing yet).
  assert.equal(agents[0]!.bytesToAgent, sent);
  assert.equal(agents[0]!.bytesFromAgent, sent);
  const conns = JSON.parse((await metaGet(serverMeta, '/debug/connections?agent=edge-1')).body) as Array<Record<string, unknown>>;
  assert.equal(conns.length, 1);
  assert.equal(conns[0]!.address, `127.0.0.1:${echo.port}`);
  assert.deepEqual(JSON.parse((await metaGet(serverMeta, '/debug/connections?agent=nobody')).body), []);
  const agentConns = JSON.parse((await metaGet(agentMeta, '/debug/connections')).body) as Array<Record<string, unknown>>;
  assert.equal(agentConns.length, 1);
  assert.equal(agentConns[0]!.address, `127.0.0.1:${echo.port}`);

  const table = await runProcess(h, SERVER_BIN, ['agents', '--meta-addr', `127.0.0.1:${serverMeta}`]);
  assert.equal(table.code, 0, table.output);
  const lines = table.output.split('\n');
  assert.match(lines[0]!, /^AGENT\s+ADDRESSES\s+CONNECTIONS\s+AGE\s+RTT\s+STATUS$/);
  assert.match(lines[1]!, /^edge-1\s+127\.0\.0\.1\s+1\s+\d+s\s+\S+\s+READY$/);
  const wide = await runProcess(h, SERVER_BIN, ['agents', '--meta-addr', `127.0.0.1:${serverMeta}`, '-o', 'wide']);
  // 3,577 bytes each way.
  assert.match(wide.output.split('\n')[1]!, /edge-1\s+127\.0\.0\.1\s+1\s+\d+s\s+\S+\s+READY\s+edge-1\s+127\.0\.0\.1:\d+\s+3\.5KiB\s+3\.5KiB\s+/);
  const json = await runProcess(h, SERVER_BIN, ['agents', '--meta-addr', `127.0.0.1:${serverMeta}`, '-o', 'json']);
  assert.equal((JSON.parse(json.output) as unknown[]).length, 1);
  const down = await runProcess(h, SERVER_BIN, ['agents', '--meta-addr', `127.0.0.1:${await closedPort()}`]);
  assert.equal(down.code, 1);
  assert.match(down.output, /cannot reach the meta server at 127\.0\.0\.1:\d+ .*is yurt-tunnel-server running with --meta-port\?/);
});

test('profiles on request, one at a time, only with --enable-profiling; bad requests get clear answers and the meta server keeps serving', async (t) => {
  const h = harness(t);
  const { serverMeta, agentMeta } = await startPair(h, { profiling: true });
  const profile = await metaGet(serverMeta, '/debug/pprof/profile?seconds=0.3');
  assert.equal(profile.status, 200);
  assert.ok(Array.isArray((JSON.parse(profile.body) as { nodes: unknown[] }).nodes));
  const heap = await metaGet(serverMeta, '/debug/pprof/heap');
  assert.equal(heap.status, 200);
  assert.ok(heap.body.startsWith('{"snapshot":'), heap.body.slice(0, 40));
  assert.equal((await metaGet(serverMeta, '/debug/pprof/profile?seconds=-1')).status, 400);
  assert.equal((await metaGet(agentMeta, '/debug/pprof/profile')).status, 404, 'the agent was started without profiling');

  assert.equal((await metaGet(serverMeta, '/metrics', 'POST')).status, 405);
  const missing = await metaGet(serverMeta, '/nope');
  assert.equal(missing.status, 404);
  assert.match(missing.body, /this server answers \/healthz, \/readyz, \/metrics, \/debug\/agents/);
  for (const garbage of ['\x00\x01\x02 garbage\r\n\r\n', 'GET /healthz HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n', 'GET /%zz HTTP/1.1\r\n\r\n']) {
    const s = connect(serverMeta, '127.0.0.1');
    s.on('error', () => {});
    s.setEncoding('latin1');
    let answer = '';
    s.on('data', (c: string) => (answer += c));
    s.end(garbage);
    await new Promise((r) => s.once('close', r));
    assert.match(answer, /^HTTP\/1\.1 400 /, `the answer to ${JSON.stringify(garbage)}`);
  }
  assert.deepEqual(await metaGet(serverMeta, '/healthz'), { status: 200, body: 'ok' });
});
