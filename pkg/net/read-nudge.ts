// Makes a socket that an HTTP/2 session owns read again, so that a reset or
// close the kernel already holds is reported now.
//
// Node's HTTP/2 session stops reading its socket while one of its writes is
// under way (backpressure), and starts again when the write completes. Over
// TLS, when the peer resets the connection in the middle of a large write (a
// bulk upload with a full send buffer), the failed write is not reported back
// to the session: the write never completes, reading never restarts, and the
// reset sits unread; no 'error', 'end' or 'close' is emitted until something
// reads. Restarting the read on the TLS handle delivers it at once (ECONNRESET
// or EOF, then 'close'); on a healthy connection it only reads what arrives,
// which the session handles as always. There is no public API for it: the
// handle's readStart is internal, so a missing one is tolerated (the liveness
// check still catches the link, later).

import type { Socket } from 'node:net';

interface ReadableHandle {
  readStart?: () => number;
}

export function nudgeRead(socket: Socket | undefined): void {
  if (socket === undefined || socket.destroyed) return;
  const handle = (socket as unknown as { _handle?: ReadableHandle | null })._handle;
  if (typeof handle?.readStart === 'function') handle.readStart();
}
