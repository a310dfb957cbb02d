// The bench client's connection: a socket read through one reused buffer
// (net's `onread`), so that reading costs no allocation per chunk and the
// client reads direct loopback several times faster than any tunnel can
// deliver (bench/README.md, "Is the client the bottleneck?"). A path is either
// the target straight over TCP or a CONNECT through a proxier's Unix socket;
// the CONNECT answer is parsed here, and what follows it is payload.

import { connect, type Socket } from 'node:net';

/** Where a bench connection goes. */
export type BenchPath = { kind: 'tcp'; port: number } | { kind: 'connect'; uds: string; address: string; proxyHost?: string };

/** One buffer for every socket of the process: `onread` callbacks run one at a time and never keep it. */
const READ_BUFFER = Buffer.allocUnsafe(1024 * 1024);
const MAX_HEAD = 16 * 1024;

export class LeanConn {
  /** Payload bytes received (after the CONNECT answer). */
  received = 0;
  /** Called with each payload chunk's size; the bytes are in `READ_BUFFER`, valid only during the call. */
  onBytes: ((n: number) => void) | undefined;
  readonly closed: Promise<void>;
  private head: Buffer | undefined;
  private settle: ((err?: Error) => void) | undefined;

  private constructor(
    readonly socket: Socket,
    awaitingHead: boolean,
  ) {
    this.head = awaitingHead ? Buffer.alloc(0) : undefined;
    this.closed = new Promise((resolve) => socket.once('close', () => resolve()));
    socket.on('error', (err) => this.settle?.(err));
    socket.once('close', () => this.settle?.(new Error('closed before the tunnel was established')));
  }

  /** Opens a connection; resolves once bytes can flow (TCP connected, or the proxier answered 200). */
  static open(path: BenchPath): Promise<LeanConn> {
    let conn: LeanConn | undefined;
    const onread = {
      buffer: READ_BUFFER,
      callback: (n: number): boolean => {
        conn!.onRead(n);
        return true;
      },
    };
    const socket = path.kind === 'tcp' ? connect({ port: path.port, host: '127.0.0.1', noDelay: true, onread }) : connect({ path: path.uds, onread });
    conn = new LeanConn(socket, path.kind === 'connect');
    const c = conn;
    return new Promise<LeanConn>((resolve, reject) => {
      c.settle = (err) => {
        c.settle = undefined;
        if (err === undefined) resolve(c);
        else {
          socket.destroy();
          reject(err);
        }
      };
      socket.once('connect', () => {
        if (path.kind === 'tcp') {
          c.settle?.();
          return;
        }
        let req = `CONNECT ${path.address} HTTP/1.1\r\nHost: localhost\r\n`;
        if (path.proxyHost !== undefined) req += `X-Tunnel-Proxy-Host: ${path.proxyHost}\r\n`;
        socket.write(req + '\r\n');
      });
    });
  }

  private onRead(n: number): void {
    if (this.head === undefined) {
      this.received += n;
      this.onBytes?.(n);
      return;
    }
    this.head = Buffer.concat([this.head, READ_BUFFER.subarray(0, n)]);
    const end = this.head.indexOf('\r\n\r\n');
    if (end < 0) {
      if (this.head.length > MAX_HEAD) this.settle?.(new Error('CONNECT answer head too large'));
      return;
    }
    const status = this.head.toString('latin1', 0, Math.min(end, 200));
    const rest = this.head.length - end - 4;
    this.head = undefined;
    if (!/^HTTP\/1\.[01] 200/.test(status)) {
      this.settle?.(new Error(`CONNECT refused: ${status.split('\r\n')[0]}`));
      return;
    }
    this.settle?.();
    if (rest > 0) {
      // Payload that came with the answer (rare: the target speaks only when asked).
      this.received += rest;
      this.onBytes?.(rest);
    }
  }

  write(data: Buffer | string): void {
    this.socket.write(data);
  }

  /** Ends our side and waits until the far side has ended too (the close handshake). */
  async close(): Promise<void> {
    this.socket.end();
    await this.closed;
  }

  destroy(): void {
    this.socket.destroy();
  }
}
