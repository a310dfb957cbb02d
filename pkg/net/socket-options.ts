// Sockets whose options cost no maps of their own (Node 20).
//
// node:net's Socket constructor copies its options (`{ ...options }`) and then
// sets allowHalfOpen, emitClose, autoDestroy and decodeStrings on the copy. In
// V8 11 (Node 20) the map of such a copy sits outside the transition tree, so
// each key added to it makes a new map: three or four maps per socket, in old
// space, with descriptor arrays that live as long as they do. That is ~1 KB of
// old generation per connection which only a full mark-compact frees; a server
// taking thousands of short connections gets its mark-compacts that much sooner
// (bench/README, "Closed connections in the old generation"). Options that
// already hold those keys are copied onto a map V8 has cached, and the
// constructor only overwrites them.
//
// Sockets we construct take `withSocketDefaults()`. Sockets a net.Server
// accepts are constructed by Node from options of its own;
// `acceptWithSocketDefaults()` replaces the listening handle's connection
// callback with one that passes complete options and otherwise does what
// Node 20's does. It relies on net.Server's internals, so it is installed only
// on the Node line it was written against, and only when they are there.

import { channel } from 'node:diagnostics_channel';
import { Socket, type Server, type SocketConstructorOpts } from 'node:net';

/** The values net.Socket's constructor gives these keys whatever it is passed (Node 20). */
const CONSTRUCTOR_SET = { emitClose: false, autoDestroy: true, decodeStrings: false } as const;

/** `opts` with every key net.Socket's constructor sets, so that its copy needs no new map. */
export function withSocketDefaults<T extends SocketConstructorOpts>(opts: T): T {
  return { allowHalfOpen: false, ...opts, ...CONSTRUCTOR_SET };
}

/** What Node 20's net.Server keeps and its connection callback reads. */
interface ServerInternals {
  _handle: { onconnection?: ConnectionCallback } | null;
  _connections: number;
  allowHalfOpen: boolean;
  pauseOnConnect: boolean;
  noDelay: boolean;
  keepAlive: boolean;
  /** Seconds. */
  keepAliveInitialDelay: number;
  highWaterMark: number;
}

type ConnectionCallback = (this: unknown, err: number, clientHandle?: object) => void;

const serverSocketChannel = channel('net.server.socket');

/** Whether this Node's accept path is the one acceptWithSocketDefaults() stands in for. */
export const ACCEPT_REPLACEABLE = process.versions.node.startsWith('20.');

/**
 * Makes `server` (listening) construct the sockets it accepts from complete
 * options. Returns false, changing nothing, where Node's own path is kept.
 */
export function acceptWithSocketDefaults(server: Server): boolean {
  const s = server as unknown as ServerInternals;
  const handle = s._handle;
  const nodeCallback = handle?.onconnection;
  if (!ACCEPT_REPLACEABLE || handle == null || typeof nodeCallback !== 'function' || typeof s._connections !== 'number') return false;
  handle.onconnection = function onconnection(err, clientHandle) {
    // Errors and connections over maxConnections take Node's path: they make no Socket.
    if (err !== 0 || clientHandle === undefined || (server.maxConnections > 0 && s._connections >= server.maxConnections)) {
      nodeCallback.call(this, err, clientHandle);
      return;
    }
    // Complete as it stands (allowHalfOpen and CONSTRUCTOR_SET in it), so no copy through withSocketDefaults().
    const socket = new Socket({
      handle: clientHandle,
      allowHalfOpen: s.allowHalfOpen,
      pauseOnCreate: s.pauseOnConnect,
      readable: true,
      writable: true,
      readableHighWaterMark: s.highWaterMark,
      writableHighWaterMark: s.highWaterMark,
      ...CONSTRUCTOR_SET,
    } as SocketConstructorOpts);
    if (s.noDelay) socket.setNoDelay(true);
    // The server keeps the delay in seconds, as the handle takes it; the socket's method takes milliseconds.
    if (s.keepAlive) socket.setKeepAlive(true, s.keepAliveInitialDelay * 1000);
    s._connections++;
    // The socket decrements _connections through _server when it closes (server.close() waits on that).
    const accepted = socket as unknown as { server: Server; _server: Server };
    accepted.server = server;
    accepted._server = server;
    server.emit('connection', socket);
    if (serverSocketChannel.hasSubscribers) serverSocketChannel.publish({ socket });
  };
  return true;
}
