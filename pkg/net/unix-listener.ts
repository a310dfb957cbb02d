// Unix socket listeners (the proxier's socket, the egress selector's). A socket
// file at the path belongs to whoever answers on it: when a process does, the
// start is refused, as a TCP port in use is (EADDRINUSE); only a file nothing
// answers on (connect: ECONNREFUSED, its process is gone) is replaced.
//
// The socket is bound under a temporary name beside the path, given its mode,
// and renamed onto the path: it appears there complete, replacing a stale file
// in one step. This is also what keeps us from deleting someone else's socket:
// libuv unlinks the name a pipe was bound to when it closes, whatever file is
// there by then, and that name is now the temporary one. The path itself is
// unlinked on close only while it is still our socket (the same inode).

import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { lstatSync, unlinkSync, type Stats } from 'node:fs';
import { chmod, lstat, rename } from 'node:fs/promises';
import { connect, type Server } from 'node:net';
import { dirname, join } from 'node:path';
import type { Logger } from '../log/logger.js';
import { ConfigError, errorCode, errorMessage } from '../protocol/errors.js';
import { within } from '../timers/sleep.js';
import { listen, stopListening, type ListenerName } from './listen.js';

/** How long a process at an existing socket file has to accept our probe before we call the file in use. */
const PROBE_TIMEOUT_MS = 2000;

/** A Unix socket listener's name, and the flag that sets its path (for start-up errors). */
export interface UnixListenerName extends ListenerName {
  /** `--interceptor-proxier-uds`; the name stands in when there is no flag. */
  flag?: string;
}

/** The socket file a listener made: whether the path still reaches it, and removing it when it closes. */
export class OwnedSocketFile {
  constructor(
    readonly path: string,
    private readonly made: Pick<Stats, 'dev' | 'ino'>,
    private readonly log: Logger,
  ) {}

  /** Why callers of the path no longer reach this listener (the file was removed or replaced), or undefined. */
  problem(): string | undefined {
    let st: Stats;
    try {
      st = lstatSync(this.path);
    } catch (err: unknown) {
      if (errorCode(err) === 'ENOENT') return `socket ${this.path} was removed: nothing can connect to it; restart the server to create it again`;
      return `socket ${this.path} cannot be checked: ${errorMessage(err)}`;
    }
    if (st.dev !== this.made.dev || st.ino !== this.made.ino) {
      return `socket ${this.path} was replaced by another file: callers reach whatever made it, not this server`;
    }
    return undefined;
  }

  /** Unlinks the path if it is still this listener's socket (after the server closed). Never throws. */
  release(): void {
    if (this.problem() !== undefined) return;
    try {
      unlinkSync(this.path);
    } catch (err: unknown) {
      if (errorCode(err) !== 'ENOENT') this.log.warn('could not remove the socket file', { socket: this.path, error: errorMessage(err) });
    }
  }
}

/**
 * Listens on the Unix socket `path` with file mode `mode`. Refuses (ConfigError)
 * a path taken by a file that is not a socket, or by a socket a process answers
 * on; replaces a stale socket file.
 */
export async function listenUnix(server: Server, path: string, mode: number, who: UnixListenerName): Promise<OwnedSocketFile> {
  const named = who.flag === undefined ? path : `${who.flag} ${path}`;
  // Short, so that the name fits wherever the path does (a socket path has at most 107 bytes).
  const temporary = join(dirname(path), `.${randomBytes(3).toString('hex')}`);
  if (Buffer.byteLength(temporary) > Buffer.byteLength(path) && Buffer.byteLength(temporary) > 107) {
    throw new ConfigError('YT_ERR_SOCKET_PATH', `${named}: the directory's path is too long for a Unix socket; choose a shorter one`);
  }
  await listen(server, { path: temporary, backlog: 1024 }, { ...who, address: path });
  try {
    await chmod(temporary, mode);
    const stale = await checkTakeover(path, named);
    await rename(temporary, path);
    if (stale) who.logger.info('replaced a stale socket file: nothing answered on it', { socket: path });
    const st = await lstat(path);
    return new OwnedSocketFile(path, st, who.logger);
  } catch (err: unknown) {
    await stopListening(server);
    throw err;
  }
}

/** Throws unless `path` is free (false) or holds a stale socket file (true). */
async function checkTakeover(path: string, named: string): Promise<boolean> {
  let st: Stats;
  try {
    st = await lstat(path);
  } catch (err: unknown) {
    if (errorCode(err) === 'ENOENT') return false;
    throw err;
  }
  if (!st.isSocket()) {
    throw new ConfigError('YT_ERR_SOCKET_PATH', `${named} exists and is not a socket; refusing to replace it (remove it or choose another path)`);
  }
  const probe = await probeSocket(path);
  if (probe === 'stale') return true;
  const how = probe === 'answers' ? 'a process answers on it (another yurt-tunnel-server?)' : `it did not refuse a connection (${probe})`;
  throw new ConfigError('YT_ERR_SOCKET_IN_USE', `${named}: address already in use: ${how}; stop that process, or choose another path`);
}

/** Whether a process accepts connections on the socket file: 'answers', 'stale' (refused, or gone), or what else happened. */
async function probeSocket(path: string): Promise<string> {
  const socket = connect({ path });
  let result = `no answer within ${PROBE_TIMEOUT_MS} ms`;
  try {
    const settled = once(socket, 'connect').then(
      () => (result = 'answers'),
      (err: unknown) => (result = errorCode(err) === 'ECONNREFUSED' || errorCode(err) === 'ENOENT' ? 'stale' : errorMessage(err)),
    );
    await within(settled, PROBE_TIMEOUT_MS);
    return result;
  } finally {
    socket.destroy();
  }
}
