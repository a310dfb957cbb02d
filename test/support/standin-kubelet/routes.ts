// Which handler a request goes to, and the small fixed answers (health,
// metrics, stats, 404, 405). Bodies match what the recorded stand-in sent.

import { textResponse, type SimpleResponse } from './http-response.js';
import type { StreamKind } from './exec.js';

export type Route =
  | { kind: 'simple'; response: SimpleResponse }
  | { kind: 'logs'; namespace: string; pod: string; container: string }
  | { kind: 'bytes' }
  | { kind: 'stream'; stream: StreamKind; namespace: string; pod: string; container: string }
  | { kind: 'portForward'; namespace: string; pod: string };

const METRICS = '# HELP standin_kubelet_up Whether the stand-in kubelet is serving.\n' + '# TYPE standin_kubelet_up gauge\n' + 'standin_kubelet_up 1\n';

function statsSummary(nodeName: string): string {
  // Spacing as in the recorded answer (Python's json.dumps), so lengths match the fixture.
  return `{"node": {"nodeName": ${JSON.stringify(nodeName)}, "startTime": "2024-01-01T00:00:00Z"}, "pods": []}`;
}

export function notFound(): SimpleResponse {
  return textResponse(404, '404 page not found\n', [['X-Content-Type-Options', 'nosniff']]);
}

function methodNotAllowed(allowed: readonly string[]): SimpleResponse {
  return textResponse(405, '405: Method Not Allowed', [['Allow', allowed.join(', ')]]);
}

function decodeSegments(pathname: string): string[] | null {
  try {
    return pathname
      .split('/')
      .slice(1)
      .map((s) => decodeURIComponent(s));
  } catch (err: unknown) {
    if (err instanceof URIError) return null; // malformed percent-encoding
    throw err;
  }
}

export function route(method: string, pathname: string, nodeName: string): Route {
  const seg = decodeSegments(pathname);
  if (seg === null) return { kind: 'simple', response: textResponse(400, 'malformed percent-encoding in the request path\n') };
  const getOnly = (make: () => Route): Route =>
    method === 'GET' || method === 'HEAD' ? make() : { kind: 'simple', response: methodNotAllowed(['GET', 'HEAD']) };
  const getOrPost = (make: () => Route): Route =>
    method === 'GET' || method === 'POST' ? make() : { kind: 'simple', response: methodNotAllowed(['GET', 'POST']) };
  const nonEmpty = (parts: string[]): boolean => parts.every((p) => p !== '');
  const [first, ...rest] = seg;

  if (pathname === '/healthz') return getOnly(() => ({ kind: 'simple', response: textResponse(200, 'ok') }));
  if (pathname === '/metrics') {
    return getOnly(() => ({
      kind: 'simple',
      response: { status: 200, headers: [['Content-Type', 'text/plain; version=0.0.4; charset=utf-8']], body: METRICS },
    }));
  }
  if (pathname === '/stats/summary') {
    return getOnly(() => ({ kind: 'simple', response: { status: 200, headers: [['Content-Type', 'application/json']], body: statsSummary(nodeName) } }));
  }
  if (pathname === '/bytes') return getOnly(() => ({ kind: 'bytes' }));
  if (first === 'containerLogs' && rest.length === 3 && nonEmpty(rest)) {
    return getOnly(() => ({ kind: 'logs', namespace: rest[0]!, pod: rest[1]!, container: rest[2]! }));
  }
  // kubelet also serves /{exec,attach}/{ns}/{pod}/{uid}/{container} and /portForward/{ns}/{pod}/{uid}.
  if ((first === 'exec' || first === 'attach') && (rest.length === 3 || rest.length === 4) && nonEmpty(rest)) {
    return getOrPost(() => ({ kind: 'stream', stream: first, namespace: rest[0]!, pod: rest[1]!, container: rest[rest.length - 1]! }));
  }
  if (first === 'portForward' && (rest.length === 2 || rest.length === 3) && nonEmpty(rest)) {
    return getOrPost(() => ({ kind: 'portForward', namespace: rest[0]!, pod: rest[1]! }));
  }
  return { kind: 'simple', response: notFound() };
}
