import { chmod, lstat, unlink } from 'node:fs/promises';
import type { Server } from 'node:net';
import { ConfigError, errorCode } from '../protocol/errors.js';
import { listen, type ListenerName } from './listen.js';

/**
 * Listens on a Unix socket path, replacing a stale socket file left by an
 * earlier run (but never another kind of file), and sets the file's mode.
 */
export async function listenUnix(server: Server, path: string, mode: number, who: ListenerName): Promise<void> {
  try {
    const st = await lstat(path);
    if (!st.isSocket()) {
      throw new ConfigError('YT_ERR_SOCKET_PATH', `${path} exists and is not a socket; refusing to replace it (remove it or choose another path)`);
    }
    await unlink(path);
  } catch (err: unknown) {
    if (errorCode(err) !== 'ENOENT') throw err;
  }
  await listen(server, { path, backlog: 1024 }, who);
  await chmod(path, mode);
}
