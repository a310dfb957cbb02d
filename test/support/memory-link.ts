// An agent-side and a server-side packet call (pkg/grpc) joined by real
// node:http2 sessions over an in-memory transport: no kernel, no TLS, nothing
// timed, so what the data path does per packet (transport writes, Buffer
// allocations, bytes copied) can be counted exactly. The windows are the ones
// production uses (4 MiB per stream, 16 MiB per connection).

import { once } from 'node:events';
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type Http2Server, type ServerHttp2Stream } from 'node:http2';
import { Duplex } from 'node:stream';
import { ClientPacketCall } from '../../pkg/grpc/client-call.js';
import type { GrpcPacketStreamOptions } from '../../pkg/grpc/packet-stream.js';
import { ServerPacketCall } from '../../pkg/grpc/server-call.js';
import type { Packet } from '../../pkg/protocol/packet.js';
import type { PacketLink } from '../../pkg/mux/packet-link.js';

const STREAM_WINDOW = 4 * 1024 * 1024;
const CONNECTION_WINDOW = 16 * 1024 * 1024;

const H2_DATA_FRAME = 0;
const H2_FRAME_HEADER = 9;
/** TLS's largest record: what one write reaches the peer in, at most. */
const RECORD = 16 * 1024;
/** Taken before any test counts Buffer allocations (countBufferAllocations patches the public factories). */
const allocate = Buffer.allocUnsafeSlow.bind(Buffer);

/**
 * One end of an in-memory byte pipe; counts the writes HTTP/2 makes to it and
 * the DATA frames in what it carries (it reads the frame headers as they pass).
 * Like TLS under HTTP/2, it joins the buffers of one write and hands them to
 * the peer in pieces of at most 16 KiB (records).
 */
export class MemoryTransport extends Duplex {
  peer!: MemoryTransport;
  /** Write calls (a writev counts once), and bytes written. */
  writes = 0;
  bytesWritten = 0;
  /** HTTP/2 DATA frames written through this end. */
  dataFrames = 0;
  /** Bytes to pass before the next frame header (the client's 24-byte preface comes first). */
  private skip: number;
  private readonly head = Buffer.alloc(H2_FRAME_HEADER);
  private headLength = 0;

  constructor(isClient: boolean) {
    super();
    this.skip = isClient ? 24 : 0;
  }

  private count(chunk: Buffer): void {
    this.bytesWritten += chunk.length;
    let pos = 0;
    while (pos < chunk.length) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, chunk.length - pos);
        this.skip -= n;
        pos += n;
        continue;
      }
      const n = Math.min(H2_FRAME_HEADER - this.headLength, chunk.length - pos);
      chunk.copy(this.head, this.headLength, pos, pos + n);
      this.headLength += n;
      pos += n;
      if (this.headLength === H2_FRAME_HEADER) {
        this.headLength = 0;
        if (this.head[3] === H2_DATA_FRAME) this.dataFrames++;
        this.skip = this.head.readUIntBE(0, 3);
      }
    }
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this._writev([{ chunk }], cb);
  }

  override _writev(chunks: Array<{ chunk: Buffer }>, cb: (err?: Error | null) => void): void {
    this.writes++;
    let length = 0;
    for (const { chunk } of chunks) length += chunk.length;
    const joined = allocate(length);
    let at = 0;
    for (const { chunk } of chunks) {
      this.count(chunk);
      at += chunk.copy(joined, at);
    }
    // On the next tick, as a socket would: a peer that read inside our write would re-enter HTTP/2.
    process.nextTick(() => {
      for (let i = 0; i < length; i += RECORD) this.peer.push(joined.subarray(i, Math.min(length, i + RECORD)));
    });
    cb();
  }

  override _read(): void {}

  override _final(cb: (err?: Error | null) => void): void {
    process.nextTick(() => this.peer.push(null));
    cb();
  }
}

export interface LinkPair<T extends Duplex> {
  /** The agent's end (a gRPC client call), and the HTTP/2 stream it writes to. */
  agent: ClientPacketCall;
  agentStream: ClientHttp2Stream;
  /** The server's end (a gRPC server call). */
  server: ServerPacketCall;
  /** The transport the agent writes to (toward the server), and the server's. */
  agentTransport: T;
  serverTransport: T;
  /** Packets each end received, handed to the test's handler too. */
  onAgentPacket(handler: (p: Packet) => void): void;
  onServerPacket(handler: (p: Packet) => void): void;
  close(): Promise<void>;
}

export type MemoryLinkPair = LinkPair<MemoryTransport>;

/** Opens the pair; both calls are started and ready to send. `server` options go to the server's call. */
export async function memoryLinkPair(opts: { server?: GrpcPacketStreamOptions } = {}): Promise<MemoryLinkPair> {
  const agentTransport = new MemoryTransport(true);
  const serverTransport = new MemoryTransport(false);
  agentTransport.peer = serverTransport;
  serverTransport.peer = agentTransport;
  return linkPairOver(agentTransport, serverTransport, opts);
}

async function linkPairOver<T extends Duplex>(agentTransport: T, serverTransport: T, opts: { server?: GrpcPacketStreamOptions }): Promise<LinkPair<T>> {
  const server: Http2Server = http2.createServer({ settings: { initialWindowSize: STREAM_WINDOW } });
  server.on('session', (s) => s.setLocalWindowSize(CONNECTION_WINDOW));
  const serverStream = once(server, 'stream') as Promise<[ServerHttp2Stream]>;
  server.emit('connection', serverTransport);
  const session: ClientHttp2Session = http2.connect('http://memory', {
    createConnection: () => agentTransport,
    settings: { initialWindowSize: STREAM_WINDOW },
  });
  session.on('connect', () => session.setLocalWindowSize(CONNECTION_WINDOW));
  const request = session.request({ ':method': 'POST', ':path': '/agent.AgentService/Connect', 'content-type': 'application/grpc', te: 'trailers' });
  const [stream] = await serverStream;
  stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
  await once(request, 'response');

  let agentHandler: (p: Packet) => void = () => {};
  let serverHandler: (p: Packet) => void = () => {};
  const agent = new ClientPacketCall(request);
  const serverCall = new ServerPacketCall(stream, opts.server);
  agent.start({ onPacket: (p) => agentHandler(p), onClose: () => {} });
  serverCall.start({ onPacket: (p) => serverHandler(p), onClose: () => {} });
  return {
    agent,
    agentStream: request,
    server: serverCall,
    agentTransport,
    serverTransport,
    onAgentPacket: (h) => (agentHandler = h),
    onServerPacket: (h) => (serverHandler = h),
    close: async () => {
      agent.cancel('test over');
      session.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      for (const s of [agentTransport, serverTransport]) s.destroy();
    },
  };
}

/**
 * Sends `count` DATA packets of `payload` on `link` as fast as it takes them: on
 * while sendData calls back at once, and on from the callback once the link
 * was full (back-pressure), as a connection's writer does.
 */
export function sendWithBackPressure(link: Pick<PacketLink, 'sendData'>, connectID: bigint, payload: Buffer, count: number): void {
  let sent = 0;
  const next = (): void => {
    while (sent < count) {
      sent++;
      let waiting = true;
      link.sendData(connectID, payload, () => {
        if (waiting) waiting = false;
        else next();
      });
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- false if the callback already ran
      if (waiting) {
        waiting = false;
        return;
      }
    }
  };
  next();
}
