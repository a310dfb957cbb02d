// Every listener of the real server process gets a corpus of malformed input:
// both master ports, the HTTP proxy port, the CONNECT proxier's socket, the GRPC egress socket and the agent port. Each
// item gets an answer or a closed connection, never a crash; afterwards every
// listener still serves, and the process is alive.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect as tlsConnect, type ConnectionOptions } from 'node:tls';
import { encodeHeaderBlock } from '../../pkg/grpc/hpack/hpack.js';
import { grpcFrameHeader } from '../../pkg/grpc/frame.js';
import { encodePacket } from '../../pkg/protocol/codec.js';
import type { KnownPacket } from '../../pkg/protocol/packet.js';
import { harness, type Harness } from '../support/harness.js';
import { H2_PREFACE, h2Frame } from '../support/http2-frames.js';
import { AGENT_BIN, SERVER_BIN, startProcess } from '../support/processes.js';
import { connectVia, readExactly, startEchoServer, tempDir } from '../support/tunnel.js';
import { issueAgentCertificate, localAgentFlags, localServerFlags } from '../../hack/local-tunnel.js';
import { freeLowPort } from '../../hack/ports.js';

const LIMIT = { timeout: 120_000 };

function grpcMessage(p: KnownPacket): Buffer {
  const body = encodePacket(p);
  return Buffer.concat([grpcFrameHeader(body.length), body]);
}

type Dial = () => Promise<Socket>;

/** Writes `bytes` (then optionally closes its side) and waits for the answer or the close, at most 1 s; returns what came back. */
async function poke(h: Harness, dial: Dial, bytes: Buffer | string, endAfter = false): Promise<string> {
  let socket: Socket;
  try {
    socket = await dial();
  } catch (err: unknown) {
    return `dial failed: ${String(err)}`;
  }
  h.defer(() => socket.destroy());
  let got = '';
  socket.on('data', (c: Buffer) => (got += c.toString('latin1')));
  socket.on('error', () => {});
  if (endAfter) socket.end(bytes);
  else socket.write(bytes);
  await Promise.race([new Promise((r) => socket.once('close', r)), new Promise((r) => setTimeout(r, 1000).unref())]);
  socket.destroy();
  return got;
}

const CRLF = '\r\n';
const httpCorpus: Array<[string, string | Buffer, boolean?]> = [
  ['bad percent-encoding in the pod path', `GET /exec/%zz/pod?command=sh HTTP/1.1${CRLF}Host: 10.0.0.1:10250${CRLF}${CRLF}`],
  ['bad percent-encoding in X-Forwarded-Uri', `GET /x HTTP/1.1${CRLF}Host: 10.0.0.1:10250${CRLF}X-Forwarded-Uri: /api/v1/nodes/%E0%A4%A/proxy/x${CRLF}${CRLF}`],
  ['empty Host', `GET / HTTP/1.1${CRLF}Host: ${CRLF}${CRLF}`],
  ['Host "["', `GET / HTTP/1.1${CRLF}Host: [${CRLF}${CRLF}`],
  ['Host with port 99999', `GET / HTTP/1.1${CRLF}Host: 10.0.0.1:99999${CRLF}${CRLF}`],
  ['a 16 KiB Host', `GET / HTTP/1.1${CRLF}Host: ${'a'.repeat(16 * 1024)}${CRLF}${CRLF}`],
  ['two Host headers', `GET / HTTP/1.1${CRLF}Host: a:1${CRLF}Host: b:2${CRLF}${CRLF}`],
  ['non-ASCII Host', Buffer.from(`GET / HTTP/1.1${CRLF}Host: \xff\xfe\xe9:10250${CRLF}${CRLF}`, 'latin1')],
  ['control bytes in a header', Buffer.from(`GET / HTTP/1.1${CRLF}Host: a:1${CRLF}X-Bad: \x00\x01\x02${CRLF}${CRLF}`, 'latin1')],
  ['bad X-Tunnel-Proxy-Dest', `GET / HTTP/1.1${CRLF}Host: 10.0.0.1:10250${CRLF}X-Tunnel-Proxy-Dest: ::::${CRLF}${CRLF}`],
  ['Upgrade without Connection', `GET /exec/ns/pod HTTP/1.1${CRLF}Host: 127.0.0.1:10250${CRLF}Upgrade: websocket${CRLF}${CRLF}`],
  [
    'bogus WebSocket handshake',
    `GET /exec/ns/pod HTTP/1.1${CRLF}Host: 127.0.0.1:10250${CRLF}Connection: Upgrade${CRLF}Upgrade: websocket${CRLF}Sec-WebSocket-Key: !!${CRLF}${CRLF}`,
  ],
  [
    'SPDY upgrade to a node with no agent',
    `POST /portForward/ns/pod HTTP/1.1${CRLF}Host: 127.0.0.1:10250${CRLF}Connection: Upgrade${CRLF}Upgrade: SPDY/3.1${CRLF}${CRLF}`,
  ],
  [
    'an upgrade and an immediate close',
    `GET /attach/ns/pod HTTP/1.1${CRLF}Host: 127.0.0.1:10250${CRLF}Connection: Upgrade${CRLF}Upgrade: SPDY/3.1${CRLF}${CRLF}`,
    true,
  ],
  ['a body shorter than its Content-Length', `POST /run/ns/pod/c HTTP/1.1${CRLF}Host: 127.0.0.1:10250${CRLF}Content-Length: 100000${CRLF}${CRLF}abc`, true],
  ['chunked garbage', `POST / HTTP/1.1${CRLF}Host: 127.0.0.1:10250${CRLF}Transfer-Encoding: chunked${CRLF}${CRLF}zz${CRLF}garbage${CRLF}`],
  ['an absurd method', `FROBNICATE / HTTP/1.1${CRLF}Host: 127.0.0.1:10250${CRLF}${CRLF}`],
  ['HTTP/0.9', `GET /${CRLF}`],
  ['a 100 KiB header', `GET / HTTP/1.1${CRLF}Host: 127.0.0.1:10250${CRLF}X-Big: ${'b'.repeat(100 * 1024)}${CRLF}${CRLF}`],
  ['binary garbage', Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 131 + 7) % 256))],
  ['a head that stops halfway', `GET /containerLogs/ns/pod/c HTTP/1.1${CRLF}Host: 127.0`, true],
];

/** What only an HTTP proxy reads: absolute URIs. */
const proxyCorpus: Array<[string, string | Buffer, boolean?]> = [
  ['absolute URI with user info', `GET http://u:p@edge-1:9100/ HTTP/1.1${CRLF}Host: edge-1:9100${CRLF}${CRLF}`],
  ['absolute URI with port 99999', `GET http://edge-1:99999/ HTTP/1.1${CRLF}Host: edge-1${CRLF}${CRLF}`],
  ['absolute URI to an unknown node', `GET http://nowhere:9100/metrics HTTP/1.1${CRLF}Host: nowhere:9100${CRLF}${CRLF}`],
  ['absolute URI to a port not allowed', `GET http://10.0.0.1:22/ HTTP/1.1${CRLF}Host: 10.0.0.1:22${CRLF}${CRLF}`],
  ['absolute URI with a 10 KiB host', `GET http://${'h'.repeat(10 * 1024)}:9100/ HTTP/1.1${CRLF}${CRLF}`],
  ['absolute https URI', `GET https://edge-1:10250/ HTTP/1.1${CRLF}Host: edge-1:10250${CRLF}${CRLF}`],
  ['an upgrade through the proxy', `GET http://edge-1:9100/ HTTP/1.1${CRLF}Host: edge-1:9100${CRLF}Connection: Upgrade${CRLF}Upgrade: websocket${CRLF}${CRLF}`],
];

const proxierCorpus: Array<[string, string | Buffer, boolean?]> = [
  ['garbage', Buffer.from(Array.from({ length: 2048 }, (_, i) => (i * 37) % 256))],
  ['CONNECT without a port', `CONNECT 127.0.0.1 HTTP/1.1${CRLF}${CRLF}`],
  ['CONNECT to port 0', `CONNECT 127.0.0.1:0 HTTP/1.1${CRLF}${CRLF}`],
  ['CONNECT to port 99999', `CONNECT 127.0.0.1:99999 HTTP/1.1${CRLF}${CRLF}`],
  ['CONNECT to "[::1"', `CONNECT [::1:80 HTTP/1.1${CRLF}${CRLF}`],
  ['CONNECT with spaces', `CONNECT a b c:1 HTTP/1.1${CRLF}${CRLF}`],
  ['CONNECT to a 10 KiB host', `CONNECT ${'h'.repeat(10 * 1024)}:80 HTTP/1.1${CRLF}${CRLF}`],
  ['a head over the limit', `CONNECT 127.0.0.1:1 HTTP/1.1${CRLF}X: ${'x'.repeat(70 * 1024)}${CRLF}${CRLF}`],
  ['a close mid-head', `CONNECT 127.0.0.1:1 HT`, true],
  ['a bad X-Tunnel-Proxy-Host', `CONNECT 127.0.0.1:1 HTTP/1.1${CRLF}X-Tunnel-Proxy-Host: ${'\u00ff'.repeat(10)}${CRLF}${CRLF}`],
];

test('a corpus of malformed input to every listener of the real server: answers or closes, and every listener still serves', LIMIT, async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const certDir = join(dir, 'pki');
  const udsPath = join(dir, 'proxier.sock');
  const egressPath = join(dir, 'egress.sock');
  const agentPort = await freeLowPort();
  const proxyPort = await freeLowPort();
  const server = startProcess(h, SERVER_BIN, [
    '--http-proxy-port',
    String(proxyPort),
    ...localServerFlags({ certDir, agentPort, udsPath }),
    '--v',
    '2',
    '--egress-selector-enable',
    '--egress-selector-mode',
    'grpc',
    '--egress-selector-uds',
    egressPath,
  ]);
  const started = await server.waitForLine(/yurt-tunnel-server started/);
  const securePort = Number(/securePort=(\d+)/.exec(started)![1]);
  const insecurePort = Number(/insecurePort=(\d+)/.exec(started)![1]);
  const [ca, cert, key] = await Promise.all(['ca.crt', 'tunnel-proxy-client.crt', 'tunnel-proxy-client.key'].map((f) => readFile(join(certDir, f), 'utf8')));
  const tlsDial =
    (port: number, extra: ConnectionOptions = {}): Dial =>
    async () => {
      const s = tlsConnect({ host: '127.0.0.1', port, ca, cert, key, servername: 'localhost', ...extra });
      s.on('error', () => {});
      await once(s, 'secureConnect');
      return s;
    };
  const tcpDial =
    (port: number): Dial =>
    async () => {
      const s = connect(port, '127.0.0.1');
      await once(s, 'connect');
      return s;
    };
  const udsDial: Dial = async () => {
    const s = connect(udsPath);
    await once(s, 'connect');
    return s;
  };

  const answers: string[] = [];
  for (const [name, bytes, endAfter] of [...httpCorpus, ...proxyCorpus]) {
    for (const [port, dial] of [
      ['insecure', tcpDial(insecurePort)],
      ['secure', tlsDial(securePort, { ALPNProtocols: ['http/1.1'] })],
      ['proxy', tlsDial(proxyPort, { ALPNProtocols: ['http/1.1'] })],
    ] as const) {
      const got = await poke(h, dial, bytes, endAfter === true);
      answers.push(`${port} ${name}: ${got.split(CRLF)[0] ?? ''}`);
      assert.equal(server.child.exitCode, null, `the server exited after "${name}" on the ${port} port:\n${server.lines.join('\n')}`);
    }
  }
  // The malformed percent-encodings are 400s whose one line names what was wrong.
  const podPath = await poke(h, tcpDial(insecurePort), httpCorpus[0]![1]);
  assert.match(podPath, /^HTTP\/1\.1 400 Bad Request\r\n[\s\S]*\r\n\r\n[\s\S]*the request path has a malformed percent-encoding in "%zz"\n/);
  const forwarded = await poke(h, tlsDial(securePort, { ALPNProtocols: ['http/1.1'] }), httpCorpus[1]![1]);
  assert.match(forwarded, /^HTTP\/1\.1 400 Bad Request\r\n[\s\S]*\r\n\r\n[\s\S]*X-Forwarded-Uri has a malformed percent-encoding in "%E0%A4%A"\n/);
  // TLS-level garbage on the secure port: half a ClientHello, plain HTTP, no client certificate.
  await poke(h, tcpDial(securePort), Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]), true);
  await poke(h, tcpDial(securePort), `GET / HTTP/1.1${CRLF}Host: x${CRLF}${CRLF}`);
  await poke(h, tlsDial(securePort, { cert: undefined, key: undefined }), `GET / HTTP/1.1${CRLF}Host: x${CRLF}${CRLF}`);

  for (const [name, bytes, endAfter] of proxierCorpus) {
    const got = await poke(h, udsDial, bytes, endAfter === true);
    answers.push(`proxier ${name}: ${got.split(CRLF)[0] ?? ''}`);
    assert.equal(server.child.exitCode, null, `the server exited after "${name}" on the proxier:\n${server.lines.join('\n')}`);
    const viaProxy = await poke(h, tlsDial(proxyPort, { ALPNProtocols: ['http/1.1'] }), bytes, endAfter === true);
    answers.push(`proxy ${name}: ${viaProxy.split(CRLF)[0] ?? ''}`);
    assert.equal(server.child.exitCode, null, `the server exited after "${name}" on the HTTP proxy port:\n${server.lines.join('\n')}`);
  }
  assert.ok(answers.includes('proxy CONNECT to port 99999: HTTP/1.1 400 Bad Request: destination "127.0.0.1:99999" is not host:port'), answers.join('\n'));
  assert.ok(answers.includes('proxy absolute URI with user info: HTTP/1.1 400 Bad Request'), answers.join('\n'));
  assert.ok(answers.includes('proxy absolute URI to an unknown node: HTTP/1.1 400 Bad Request'), answers.join('\n'));
  assert.ok(answers.includes('proxy absolute URI to a port not allowed: HTTP/1.1 403 Forbidden'), answers.join('\n'));
  assert.ok(answers.includes('proxier CONNECT without a port: HTTP/1.1 400 Bad Request: dial address "127.0.0.1" is not host:port'), answers.join('\n'));

  // The GRPC egress socket: garbage, HTTP/1.1, a cut preface, undecodable and interleaved header blocks, bad packets.
  const egressDial: Dial = async () => {
    const s = connect(egressPath);
    await once(s, 'connect');
    return s;
  };
  const h2 = h2Frame;
  const preface = H2_PREFACE;
  const settings = h2(0x4, 0, 0, Buffer.alloc(0));
  // :method POST, :scheme http, :path /ProxyService/Proxy, content-type application/grpc (literals, no indexing).
  const callHeaders = encodeHeaderBlock([
    { name: ':method', value: 'POST' },
    { name: ':scheme', value: 'http' },
    { name: ':path', value: '/ProxyService/Proxy' },
    { name: ':authority', value: egressPath },
    { name: 'content-type', value: 'application/grpc' },
  ]);
  const egressCorpus: Array<[string, Buffer]> = [
    ['garbage', Buffer.from(Array.from({ length: 2048 }, (_, i) => (i * 53) % 256))],
    ['HTTP/1.1', Buffer.from(`GET / HTTP/1.1${CRLF}Host: x${CRLF}${CRLF}`)],
    ['half a preface', preface.subarray(0, 10)],
    ['an undecodable header block', Buffer.concat([preface, settings, h2(0x1, 0x4, 1, Buffer.from([0xff, 0xff, 0xff, 0xff, 0x7f]))])],
    ['a header block interrupted by DATA', Buffer.concat([preface, settings, h2(0x1, 0, 1, callHeaders.subarray(0, 5)), h2(0x0, 0, 1, Buffer.alloc(4))])],
    ['a CONTINUATION alone', Buffer.concat([preface, settings, h2(0x9, 0x4, 1, callHeaders)])],
    [
      'an unknown method',
      Buffer.concat([
        preface,
        settings,
        h2(
          0x1,
          0x4 | 0x1,
          1,
          encodeHeaderBlock([
            { name: ':method', value: 'POST' },
            { name: ':scheme', value: 'http' },
            { name: ':path', value: '/Nope/Nope' },
            { name: ':authority', value: 'x' },
            { name: 'content-type', value: 'application/grpc' },
          ]),
        ),
      ]),
    ],
    [
      'garbage in the gRPC message',
      Buffer.concat([preface, settings, h2(0x1, 0x4, 1, callHeaders), h2(0x0, 0, 1, Buffer.from([0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff]))]),
    ],
    [
      'DATA before DIAL_REQ',
      Buffer.concat([
        preface,
        settings,
        h2(0x1, 0x4, 1, callHeaders),
        h2(0x0, 0, 1, grpcMessage({ type: 'DATA', connectID: 9n, error: '', data: Buffer.from('x') })),
      ]),
    ],
    [
      'two DIAL_REQs',
      Buffer.concat([
        preface,
        settings,
        h2(0x1, 0x4, 1, callHeaders),
        h2(
          0x0,
          0,
          1,
          Buffer.concat([
            grpcMessage({ type: 'DIAL_REQ', protocol: 'tcp', address: '10.1.1.1:1', random: 1n }),
            grpcMessage({ type: 'DIAL_REQ', protocol: 'tcp', address: '10.1.1.1:1', random: 2n }),
          ]),
        ),
      ]),
    ],
    [
      'a DIAL_REQ for udp',
      Buffer.concat([
        preface,
        settings,
        h2(0x1, 0x4, 1, callHeaders),
        h2(0x0, 0, 1, grpcMessage({ type: 'DIAL_REQ', protocol: 'udp', address: '127.0.0.1:53', random: 1n })),
      ]),
    ],
  ];
  for (const [name, bytes] of egressCorpus) {
    await poke(h, egressDial, bytes);
    assert.equal(server.child.exitCode, null, `the server exited after "${name}" on the egress socket:\n${server.lines.join('\n')}`);
  }
  assert.ok(
    server.lines.some((l) => /frames we refuse; sent GOAWAY and closed/.test(l)),
    'the undecodable block is logged',
  );

  // The agent port: garbage, TLS without a client certificate, HTTP/1.1 over TLS, an HTTP/2 preface then garbage frames.
  const agentTLS = { cert, key, ALPNProtocols: ['h2'] };
  await poke(h, tcpDial(agentPort), Buffer.from('garbage that is not TLS\r\n\r\n'));
  await poke(h, tlsDial(agentPort, { cert: undefined, key: undefined, ALPNProtocols: ['h2'] }), 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
  await poke(h, tlsDial(agentPort, { ...agentTLS, ALPNProtocols: ['http/1.1'] }), `GET / HTTP/1.1${CRLF}Host: x${CRLF}${CRLF}`);
  await poke(
    h,
    tlsDial(agentPort, agentTLS),
    Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), Buffer.from([0, 0, 4, 0xff, 0xff, 0, 0, 0, 9, 1, 2, 3, 4, 0, 0, 0, 0, 1, 0, 0, 0, 0])]),
  );
  assert.equal(server.child.exitCode, null, server.lines.join('\n'));

  // Every listener still serves: a real agent joins, a CONNECT echoes, both master ports answer.
  const agentDir = join(dir, 'agent');
  await issueAgentCertificate(certDir, 'edge-1', agentDir);
  const agent = startProcess(h, AGENT_BIN, localAgentFlags({ nodeName: 'edge-1', serverPort: agentPort, agentDir }));
  await agent.waitForLine(/connected to tunnel server/);
  const echo = await startEchoServer(h);
  const res = await connectVia(udsPath, `127.0.0.1:${echo.port}`);
  assert.equal(res.status, 200, res.head);
  res.socket.write('alive');
  assert.equal((await readExactly(res.socket, 5, res.rest)).toString(), 'alive');
  res.socket.destroy();
  // The egress socket serves too: a dial through it is answered.
  const egress = await poke(
    h,
    egressDial,
    Buffer.concat([
      preface,
      settings,
      h2(0x1, 0x4, 1, callHeaders),
      h2(0x0, 0, 1, grpcMessage({ type: 'DIAL_REQ', protocol: 'tcp', address: `127.0.0.1:${echo.port}`, random: 77n })),
    ]),
  );
  assert.ok(egress.includes('\x01'), 'a DIAL_RSP came back');
  for (const [port, dial] of [
    ['insecure', tcpDial(insecurePort)],
    ['secure', tlsDial(securePort, { ALPNProtocols: ['http/1.1'] })],
  ] as const) {
    const got = await poke(h, dial, `GET /healthz HTTP/1.1${CRLF}Host: 127.0.0.9:10250${CRLF}Connection: close${CRLF}${CRLF}`);
    assert.match(got, /^HTTP\/1\.1 503 /, `${port}: ${got}`);
  }
  assert.equal(server.lines.filter((l) => /uncaught|unhandled/i.test(l)).length, 0, server.lines.join('\n'));
  assert.equal(server.child.exitCode, null);
});
