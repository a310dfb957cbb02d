// The benchmark's target, in a process of its own. The first byte a client
// sends picks the mode:
//   'B' + 8-byte big-endian n: send n bytes, then close   (bulk)
//   'P': echo everything                                  (ping-pong)
//   'C': answer "bye" and close first                     (churn)
//   'S': send 16 KiB blocks until the client goes         (churn)
//   'E': echo the next byte, then close first             (new connections)
//   'H': echo the next byte; close first on any later one  (held idle connections)

import { createServer, type AddressInfo, type Socket } from 'node:net';

// Bulk is written in 1 MiB pieces: the kernel copies them all the same, and
// fewer writes keep the target from limiting the direct path the tunnels are
// compared with (a reader pulls whatever sizes it asks for).
const CHUNK = Buffer.alloc(1024 * 1024, 0x5a);
const BLOCK = CHUNK.subarray(0, 16 * 1024);

function stream(socket: Socket): void {
  const pump = (): void => {
    while (!socket.destroyed && socket.writable && socket.write(BLOCK));
  };
  socket.on('drain', pump);
  pump();
}

function bulk(socket: Socket, n: number): void {
  let left = n;
  const pump = (): void => {
    while (left > 0) {
      const piece = left >= CHUNK.length ? CHUNK : CHUNK.subarray(0, left);
      left -= piece.length;
      if (!socket.write(piece)) {
        socket.once('drain', pump);
        return;
      }
    }
    socket.end();
  };
  pump();
}

const server = createServer({ noDelay: true }, (socket) => {
  socket.on('error', () => {});
  let head = Buffer.alloc(0);
  const onData = (chunk: Buffer): void => {
    head = Buffer.concat([head, chunk]);
    const mode = String.fromCharCode(head[0]!);
    if (mode === 'P') {
      socket.off('data', onData);
      if (head.length > 1) socket.write(head.subarray(1));
      socket.pipe(socket);
    } else if (mode === 'B' && head.length >= 9) {
      socket.off('data', onData);
      bulk(socket, Number(head.readBigUInt64BE(1)));
      socket.resume();
    } else if (mode === 'C') {
      socket.off('data', onData);
      socket.end('bye');
    } else if (mode === 'S') {
      socket.off('data', onData);
      socket.resume();
      stream(socket);
    } else if ((mode === 'E' || mode === 'H') && head.length >= 2) {
      socket.off('data', onData);
      if (mode === 'E') {
        socket.end(head.subarray(1, 2));
      } else {
        socket.write(head.subarray(1, 2));
        if (head.length > 2) socket.end();
        else socket.once('data', () => socket.end());
      }
      socket.resume();
    } else if (mode !== 'B' && mode !== 'E' && mode !== 'H') {
      socket.destroy();
    }
  };
  socket.on('data', onData);
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${(server.address() as AddressInfo).port}\n`);
});
process.on('SIGTERM', () => process.exit(0));
