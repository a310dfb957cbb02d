// A small real CONNECT proxy on loopback for the agent's proxy tests: node:http's
// (or, given a certificate, node:https's) 'connect' event, Basic credentials
// checked, then the client piped to the target over a real socket. With TLS
// it is an https:// proxy: the agent's TLS to the server runs inside the TLS
// to it. The Debian proxies (squid, tinyproxy, dante) are in agent-proxies.test.ts.

import { once } from 'node:events';
import { createServer as createHttpServer, type IncomingMessage, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { connect, type AddressInfo, type Socket } from 'node:net';
import assert from 'node:assert/strict';
import type { Harness } from './harness.js';
import { waitFor, type TestAgent, type TestServer } from './tunnel.js';

/** The credentials the proxy wants. */
export const PROXY_USER = 'user';
export const PROXY_PASSWORD = 'secret';
export const PROXY_AUTHORIZATION = `Basic ${Buffer.from(`${PROXY_USER}:${PROXY_PASSWORD}`).toString('base64')}`;

export interface TestConnectProxy {
  port: number;
  /** CONNECT targets asked for, with the credentials presented. */
  asked: { target: string; auth: string | undefined }[];
  /** Handshakes that failed at the proxy (https:// only): the clients' alerts or non-TLS bytes, by `code`. */
  tlsClientErrors: (string | undefined)[];
}

/** A CONNECT proxy on 127.0.0.1 wanting Basic user:secret; `tls` makes it an https:// proxy. */
export async function startConnectProxy(h: Harness, tls?: { cert: string; key: string }): Promise<TestConnectProxy> {
  const asked: TestConnectProxy['asked'] = [];
  const tlsClientErrors: TestConnectProxy['tlsClientErrors'] = [];
  const sockets = new Set<Socket>();
  const server: Server = tls === undefined ? createHttpServer() : createHttpsServer({ cert: tls.cert, key: tls.key });
  server.on('tlsClientError', (err: Error & { code?: string }, socket: Socket) => {
    tlsClientErrors.push(err.code);
    socket.destroy();
  });
  server.on('connect', (req: IncomingMessage, client: Socket, head: Buffer) => {
    sockets.add(client);
    client.on('error', () => client.destroy());
    const auth = req.headers['proxy-authorization'];
    asked.push({ target: req.url ?? '', auth });
    if (auth !== PROXY_AUTHORIZATION) {
      client.end('HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm="test"\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    const [host, port] = (req.url ?? '').split(':');
    const upstream = connect(Number(port), host);
    sockets.add(upstream);
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
    upstream.once('connect', () => {
      client.write('HTTP/1.1 200 Connection established\r\n\r\n');
      if (head.length > 0) upstream.write(head);
      client.pipe(upstream).pipe(client);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  h.defer(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
  });
  return { port: (server.address() as AddressInfo).port, asked, tlsClientErrors };
}

/**
 * The agent's first retry warning is the proxy's refusal with 407, named by
 * `proxyURL` (without credentials); the wrong password is nowhere in its log
 * and it never joined.
 */
export async function expectProxyRefused(agent: TestAgent, server: TestServer, proxyURL: string): Promise<void> {
  await waitFor('a retry warning', () => agent.log.find('could not connect to the tunnel server').length > 0);
  const [warning] = agent.log.find('could not connect to the tunnel server');
  assert.equal(warning!.fields.error, `proxy ${proxyURL} (--proxy-url) refused CONNECT to ${server.agentAddress}: 407 Proxy Authentication Required`);
  assert.doesNotMatch(JSON.stringify(agent.log.records), /wrong/);
  assert.equal(server.tunnel.registry.agentCount, 0);
}
