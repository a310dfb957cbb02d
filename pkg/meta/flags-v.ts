// /debug/flags/v, as Kubernetes components serve it: GET shows the log
// verbosity (-v), PUT with the number as the body sets it for every logger of
// the process at once. The meta port has no authentication, so only a caller
// on the loopback may change it (any 127.0.0.0/8 address or ::1, whichever the
// port is bound to); anyone who can reach the port may read it.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import type { Logger } from '../log/logger.js';
import type { LogLimiter } from '../log/log-limiter.js';
import { isLoopbackHost } from '../net/own-listeners.js';

export const FLAGS_V_PATH = '/debug/flags/v';

/** The highest -v a caller may set; above 4 (every packet) nothing more is logged, as klog's callers use up to 10. */
export const MAX_VERBOSITY = 10;

/** A body longer than this cannot be a level; reading stops there. */
const MAX_BODY_BYTES = 16;

const RANGE = `the body must be the verbosity, a whole number from 0 to ${MAX_VERBOSITY} (e.g. curl -X PUT --data 2 …${FLAGS_V_PATH})`;

/** Whether a caller at `remoteAddress` (as node:net reports it) is on this machine's loopback. */
export function isLoopbackCaller(remoteAddress: string | undefined): boolean {
  if (remoteAddress === undefined) return false;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(remoteAddress);
  const address = (mapped !== null ? mapped[1]! : remoteAddress).toLowerCase();
  // isLoopbackHost also takes names and wildcards; a peer's address is never one.
  return isIP(address) !== 0 && address !== '0.0.0.0' && address !== '::' && isLoopbackHost(address);
}

/** The level `body` names, or undefined when it names none in range. */
export function parseVerbosity(body: string): number | undefined {
  const m = /^\s*(\d{1,2})\s*$/.exec(body);
  if (m === null) return undefined;
  const level = Number(m[1]);
  return level <= MAX_VERBOSITY ? level : undefined;
}

/** The request body as text, or undefined once it is longer than `max` bytes (the rest is not read). */
async function readSmallBody(req: IncomingMessage, max: number): Promise<string | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const b = chunk as Buffer;
    size += b.length;
    if (size > max) return undefined;
    chunks.push(b);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function reply(res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', 'Content-Length': Buffer.byteLength(body), ...headers });
  res.end(body);
}

/** GET, HEAD or PUT /debug/flags/v. */
export async function serveFlagsV(req: IncomingMessage, res: ServerResponse, log: Logger, limited: LogLimiter): Promise<void> {
  if (req.method === 'GET' || req.method === 'HEAD') {
    reply(res, 200, `${log.getVerbosity()}\n`);
    return;
  }
  if (req.method !== 'PUT') {
    reply(res, 405, `${req.method} is not allowed on ${FLAGS_V_PATH}; GET shows the verbosity, PUT sets it\n`, { Allow: 'GET, HEAD, PUT' });
    return;
  }
  const caller = `${req.socket.remoteAddress}:${req.socket.remotePort}`;
  if (!isLoopbackCaller(req.socket.remoteAddress)) {
    limited.warn('refused a change of the log verbosity from a caller not on the loopback', { caller });
    // The body is not read: the connection closes after the answer.
    reply(res, 403, `the log verbosity may be changed only from this machine's loopback (the meta port has no authentication); ${caller} is not\n`, {
      Connection: 'close',
    });
    return;
  }
  const body = await readSmallBody(req, MAX_BODY_BYTES);
  const level = body === undefined ? undefined : parseVerbosity(body);
  if (level === undefined) {
    limited.warn('refused a change of the log verbosity: not a level', { caller });
    reply(res, 400, `${RANGE}\n`, body === undefined ? { Connection: 'close' } : {});
    return;
  }
  const was = log.getVerbosity();
  log.setVerbosity(level);
  log.info('log verbosity changed', { from: was, to: level, caller });
  reply(res, 200, `verbosity set to ${level} (was ${was})\n`);
}
