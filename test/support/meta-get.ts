// One plain HTTP request to a meta port (server's or agent's) on loopback: its status and body.

import { request } from 'node:http';

export interface MetaRequestOptions {
  /** Sent as the request body (PUT /debug/flags/v). */
  body?: string;
  /** The meta port's address; default 127.0.0.1. */
  host?: string;
  /** The caller's own address, another loopback one. */
  localAddress?: string;
}

export function metaGet(port: number, path: string, method = 'GET', opts: MetaRequestOptions = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: opts.host ?? '127.0.0.1', port, path, method, agent: false, localAddress: opts.localAddress }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}
