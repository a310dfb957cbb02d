// Listeners that cannot accept, said in the log. A process out of file
// descriptors cannot accept a connection, but Node 20 does not hear of it:
// libuv, on EMFILE or ENFILE from accept(), closes a descriptor it keeps in
// reserve, accepts every pending connection and closes it at once (the callers
// see a reset), opens its reserve again and reports nothing. So while any
// listener is open, a probe opens and closes one descriptor every second; when
// that fails for lack of descriptors, every listener says, in one rate-limited
// error line of its own, that it cannot accept and what to do. Accept errors
// Node does report (a net.Server 'error' once listening: libuv's reserve was
// gone) take the same line, and never end the process.

import { closeSync, openSync, readFileSync } from 'node:fs';
import { devNull } from 'node:os';
import type { Server } from 'node:net';
import { LogLimiter } from '../log/log-limiter.js';
import type { Logger } from '../log/logger.js';
import { errorCode, errorMessage } from '../protocol/errors.js';

/** Who a listener is, for its log lines. */
export interface ListenerName {
  /** What the operator calls it: `agent port`, `meta port`, `proxier CONNECT socket`. */
  name: string;
  logger: Logger;
  /** The address to name in its lines, when not the one it is bound to (a Unix socket renamed into place). */
  address?: string;
  /** The flag that sets its port (`--secure-port`), named when it cannot listen. */
  flag?: string;
}

/** How often the probe looks for a free descriptor. */
export const PROBE_INTERVAL_MS = 1000;

const OUT_OF_DESCRIPTORS = new Set(['EMFILE', 'ENFILE']);

interface Watched {
  name: string;
  address: string;
  /** One line of each kind per interval (log-limiter.ts). */
  limited: LogLimiter;
}

const watched = new Set<Watched>();
let probe: NodeJS.Timeout | undefined;
/** The soft limit when the first listener started: at the limit nothing can be read, /proc/self/limits included. */
let descriptorLimit: number | undefined;

/**
 * Reports `server`'s accept failures until it closes: out of descriptors (the
 * probe) or an accept error Node emits. Call once it is listening.
 */
export function reportAcceptFailures(server: Server, who: ListenerName): void {
  const entry: Watched = { name: who.name, address: who.address ?? addressText(server), limited: new LogLimiter(who.logger, { burst: 1 }) };
  watched.add(entry);
  descriptorLimit ??= readDescriptorLimit();
  probe ??= setInterval(probeDescriptors, PROBE_INTERVAL_MS).unref();
  const onError = (err: Error): void => report(entry, errorCode(err), errorMessage(err));
  server.on('error', onError);
  server.once('close', () => {
    server.off('error', onError);
    watched.delete(entry);
    entry.limited.flush();
    if (watched.size === 0) {
      clearInterval(probe);
      probe = undefined;
    }
  });
}

function probeDescriptors(): void {
  let code: string | undefined;
  try {
    closeSync(openSync(devNull, 'r'));
    return;
  } catch (err: unknown) {
    code = errorCode(err);
    if (code === undefined || !OUT_OF_DESCRIPTORS.has(code)) {
      // Not a shortage (no /dev/null in this container?): say so once per interval, on the first listener.
      const first = watched.values().next().value;
      first?.limited.warn('cannot check for free file descriptors', { device: devNull, error: errorMessage(err) });
      return;
    }
  }
  for (const entry of watched) report(entry, code, undefined);
}

function report(entry: Watched, code: string | undefined, error: string | undefined): void {
  if (code !== undefined && OUT_OF_DESCRIPTORS.has(code)) {
    entry.limited.error(`the ${entry.name} cannot accept connections: out of file descriptors (${code}): raise the limit (ulimit -n / LimitNOFILE)`, {
      address: entry.address,
      descriptorLimit,
    });
  } else {
    entry.limited.error(`the ${entry.name} failed to accept a connection`, { address: entry.address, error });
  }
}

function addressText(server: Server): string {
  const a = server.address();
  if (a === null || typeof a === 'string') return a ?? '';
  return a.family === 'IPv6' ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`;
}

/** The soft limit on open files (Linux), or undefined where it cannot be read. */
function readDescriptorLimit(): number | undefined {
  try {
    const line = /^Max open files\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'latin1'));
    return line === null ? undefined : Number(line[1]);
  } catch {
    // Not Linux: the line goes without it.
    return undefined;
  }
}
