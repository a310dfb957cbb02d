// A ProxyService stream on an egress Unix socket, as konnectivity-client (kube-apiserver) opens one:
// packets to send, the ones that come back in order, and the call's gRPC status.

import http2 from 'node:http2';
import { connect } from 'node:net';
import { GrpcDeframer, grpcFrameHeader } from '../../pkg/grpc/frame.js';
import { PROXY_PATH } from '../../pkg/grpc/services.js';
import { encodePacket } from '../../pkg/protocol/codec.js';
import { decodePacket } from '../../pkg/protocol/decode.js';
import type { KnownPacket, Packet } from '../../pkg/protocol/packet.js';
import type { Harness } from './harness.js';

export interface ProxyCall {
  send(p: KnownPacket): void;
  next(): Promise<Packet>;
  end(): void;
  status: Promise<string>;
  closed: Promise<void>;
}

const DEFAULT_HEADERS = { ':method': 'POST', ':path': PROXY_PATH, 'content-type': 'application/grpc', te: 'trailers' };

export function proxyCall(h: Harness, path: string, headers: http2.OutgoingHttpHeaders = DEFAULT_HEADERS): ProxyCall {
  const session = http2.connect('http://localhost', { createConnection: () => connect(path) });
  // The call's status is what the tests look at.
  session.on('error', () => {});
  h.defer(() => session.destroy());
  const stream = session.request(headers, { endStream: false });
  stream.on('error', () => {});
  const deframer = new GrpcDeframer();
  const queue: Packet[] = [];
  const waiters: ((p: Packet) => void)[] = [];
  stream.on('data', (chunk: Buffer) => {
    for (const m of deframer.push(chunk)) {
      const p = decodePacket(m);
      const w = waiters.shift();
      if (w) w(p);
      else queue.push(p);
    }
  });
  return {
    send: (p) => {
      const body = encodePacket(p);
      stream.write(Buffer.concat([grpcFrameHeader(body.length), body]));
    },
    next: () => new Promise((resolve) => (queue.length > 0 ? resolve(queue.shift()!) : waiters.push(resolve))),
    end: () => stream.end(),
    status: new Promise<string>((resolve) => stream.once('trailers', (t: http2.IncomingHttpHeaders) => resolve(String(t['grpc-status'])))),
    closed: new Promise<void>((resolve) => stream.once('close', () => resolve())),
  };
}
