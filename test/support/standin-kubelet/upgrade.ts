// How a kubelet answers a request on /exec, /attach and /portForward before
// any stream exists: WebSocket handshake (golang.org/x/net/websocket rules,
// which refuse with a bare status line) or SPDY/3.1 upgrade
// (k8s.io/apimachinery httpstream rules, which answer with text bodies).

import type { IncomingMessage } from 'node:http';
import { textResponse, type SimpleResponse } from './http-response.js';
import { webSocketAccept } from './websocket-frames.js';

export type UpgradeDecision =
  | { kind: 'respond'; response: SimpleResponse }
  /** Status line (and optional text) with no headers, then close. */
  | { kind: 'bare'; status: number; text?: string }
  | { kind: 'websocket'; protocol: string; accept: string }
  | { kind: 'spdy'; protocol: string };

/** Every value of a header, comma-separated lists split, across repeated lines. */
export function headerTokens(req: IncomingMessage, name: string): string[] {
  const lower = name.toLowerCase();
  const out: string[] = [];
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
    if (req.rawHeaders[i]!.toLowerCase() !== lower) continue;
    for (const v of req.rawHeaders[i + 1]!.split(',')) {
      const t = v.trim();
      if (t !== '') out.push(t);
    }
  }
  return out;
}

function hasToken(req: IncomingMessage, name: string, token: string): boolean {
  return headerTokens(req, name).some((t) => t.toLowerCase() === token.toLowerCase());
}

export function isWebSocketRequest(req: IncomingMessage): boolean {
  return hasToken(req, 'connection', 'upgrade') && hasToken(req, 'upgrade', 'websocket');
}

/**
 * `webSocketProtocols`: subprotocols accepted over WebSocket (empty: refuse
 * every WebSocket with 403, as a v1.24 kubelet does for port-forward).
 */
export function decideUpgrade(req: IncomingMessage, webSocketProtocols: readonly string[], spdyProtocols: readonly string[]): UpgradeDecision {
  if (isWebSocketRequest(req)) {
    if (req.method !== 'GET') return { kind: 'bare', status: 405, text: 'bad method' };
    if (headerTokens(req, 'sec-websocket-version').join(',') !== '13') return { kind: 'bare', status: 400, text: 'missing or bad WebSocket Version' };
    const key = req.headers['sec-websocket-key'];
    if (typeof key !== 'string' || Buffer.from(key, 'base64').length !== 16) return { kind: 'bare', status: 400, text: 'mismatch challenge/response' };
    const offered = headerTokens(req, 'sec-websocket-protocol');
    const protocol = offered.find((p) => webSocketProtocols.includes(p));
    if (protocol === undefined) return { kind: 'bare', status: 403 };
    return { kind: 'websocket', protocol, accept: webSocketAccept(key) };
  }
  const offered = headerTokens(req, 'x-stream-protocol-version');
  if (offered.length === 0) return { kind: 'respond', response: goError(400, 'unable to upgrade: X-Stream-Protocol-Version is required') };
  const protocol = offered.find((p) => spdyProtocols.includes(p));
  if (protocol === undefined) {
    const text = `unable to upgrade: unable to negotiate protocol: client supports [${offered.join(' ')}], server accepts [${spdyProtocols.join(' ')}]`;
    return {
      kind: 'respond',
      response: goError(
        403,
        text,
        spdyProtocols.map((p) => ['X-Accepted-Stream-Protocol-Versions', p]),
      ),
    };
  }
  if (!hasToken(req, 'connection', 'upgrade') || !headerTokens(req, 'upgrade').some((t) => t.toLowerCase().includes('spdy/3.1'))) {
    return { kind: 'respond', response: goError(400, 'unable to upgrade: missing upgrade headers in request') };
  }
  return { kind: 'spdy', protocol };
}

/** Like Go's http.Error. */
export function goError(status: number, text: string, headers: Array<[string, string]> = []): SimpleResponse {
  return textResponse(status, `${text}\n`, [['X-Content-Type-Options', 'nosniff'], ...headers]);
}
