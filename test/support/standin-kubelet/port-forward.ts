// kubelet's SPDY port-forward protocol (portforward.k8s.io): each forwarded
// connection is a pair of client-opened streams sharing a `requestid`
// header, one `streamtype: error`, one `streamtype: data`, both with
// `port`. The data stream is relayed to a local TCP address chosen by pod
// port; a failure is written as text on the error stream.

import { connect, type Socket } from 'node:net';
import type { Logger } from '../../../pkg/log/logger.js';
import { RST_STATUS } from './spdy-frames.js';
import type { SpdySession } from './spdy-session.js';
import type { SpdyStream } from './spdy-stream.js';

export const PORT_FORWARD_PROTOCOLS = ['portforward.k8s.io'] as const;

export interface PortForwardTarget {
  host: string;
  port: number;
}

export interface PortForwardRecord {
  requestId: string;
  /** The pod port asked for (NaN if the header was not a number). */
  port: number;
  target: PortForwardTarget | null;
  /** performance.now() when the pair was complete, and when the relay ended. */
  openedAt: number;
  closedAt: number | null;
  /** The text written on the error stream, if any. */
  error: string | null;
  bytesToTarget: number;
  bytesFromTarget: number;
}

export interface PortForwardOptions {
  session: SpdySession;
  /** "namespace/pod", for error texts. */
  pod: string;
  targets: ReadonlyMap<number, PortForwardTarget>;
  streamCreationTimeoutMs: number;
  logger: Logger;
  /** Every outgoing socket, so the server can destroy it on close(). */
  track(socket: Socket): void;
  record(r: PortForwardRecord): void;
}

interface Pair {
  error?: SpdyStream;
  data?: SpdyStream;
  timer: NodeJS.Timeout;
}

export function servePortForward(o: PortForwardOptions): void {
  const pairs = new Map<string, Pair>();

  o.session.once('close', () => {
    for (const p of pairs.values()) clearTimeout(p.timer);
    pairs.clear();
  });

  o.session.on('stream', (stream: SpdyStream) => {
    stream.on('error', (err: Error) => o.logger.verbose(2, 'port-forward stream error', { streamID: stream.id, error: err.message }));
    const type = stream.headers['streamtype'];
    if (type !== 'error' && type !== 'data') {
      stream.reset(RST_STATUS.protocolError);
      return;
    }
    // kubectl waits for this reply before it opens the pair's second stream.
    stream.reply();
    const requestId = stream.headers['requestid'] ?? legacyRequestId(stream.id, type);
    let pair = pairs.get(requestId);
    if (pair === undefined) {
      const timer = setTimeout(() => {
        const p = pairs.get(requestId);
        if (p === undefined) return;
        pairs.delete(requestId);
        fail(p, `timed out waiting for the data and error streams of port-forward request ${requestId}`);
      }, o.streamCreationTimeoutMs);
      timer.unref();
      pair = { timer };
      pairs.set(requestId, pair);
    }
    if (pair[type] !== undefined) {
      stream.reset(RST_STATUS.protocolError);
      return;
    }
    pair[type] = stream;
    if (pair.error !== undefined && pair.data !== undefined) {
      clearTimeout(pair.timer);
      pairs.delete(requestId);
      relay(o, requestId, pair.error, pair.data);
    }
  });
}

// Clients older than requestid headers: an error stream's id is the request id, its data stream follows two ids later.
function legacyRequestId(streamId: number, type: 'error' | 'data'): string {
  return String(type === 'error' ? streamId : streamId - 2);
}

function fail(p: { error?: SpdyStream; data?: SpdyStream }, message: string): void {
  if (p.error !== undefined && !p.error.destroyed) {
    p.error.resume();
    p.error.end(message);
  }
  if (p.data !== undefined && !p.data.destroyed) {
    p.data.resume(); // drop whatever the client still sends
    p.data.end();
  }
}

function relay(o: PortForwardOptions, requestId: string, errorStream: SpdyStream, data: SpdyStream): void {
  errorStream.resume(); // the client writes nothing on it
  const portText = data.headers['port'] ?? '';
  const port = /^\d{1,5}$/.test(portText) ? Number(portText) : NaN;
  const target = o.targets.get(port) ?? null;
  const rec: PortForwardRecord = { requestId, port, target, openedAt: performance.now(), closedAt: null, error: null, bytesToTarget: 0, bytesFromTarget: 0 };
  o.record(rec);
  const failWith = (message: string): void => {
    rec.error = message;
    rec.closedAt ??= performance.now();
    o.logger.verbose(2, 'port-forward failed', { requestID: requestId, error: message });
    fail({ error: errorStream, data }, message);
  };
  if (Number.isNaN(port) || port < 1 || port > 65535) {
    failWith(`invalid port header ${JSON.stringify(portText)} in port-forward request ${requestId}`);
    return;
  }
  if (target === null) {
    failWith(`error forwarding port ${port} to pod ${o.pod}: nothing listens on port ${port} (the stand-in kubelet has no port-forward target for it)`);
    return;
  }

  const socket = connect({ host: target.host, port: target.port });
  o.track(socket);
  let failed = false;
  socket.on('error', (err: Error) => {
    failed = true;
    failWith(`error forwarding port ${port} to pod ${o.pod}: dial tcp ${target.host}:${target.port}: ${err.message}`);
  });
  socket.on('data', (c: Buffer) => (rec.bytesFromTarget += c.length));
  data.on('data', (c: Buffer) => (rec.bytesToTarget += c.length));
  // Half-closes travel both ways: the client's FIN ends our writes to the target, the target's end is our FIN.
  data.pipe(socket);
  socket.pipe(data);
  socket.once('close', () => {
    rec.closedAt ??= performance.now();
    if (!failed) {
      errorStream.end();
      if (!data.writableEnded && !data.destroyed) data.end();
    }
    data.unpipe(socket);
    data.resume();
  });
  // A reset or a lost session: nothing more can be relayed.
  data.once('close', () => socket.destroy());
}
