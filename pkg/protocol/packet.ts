// The Konnectivity packet, as a TypeScript union keyed on `type`.
//
// Field names follow proto/client.proto. int64 fields (`random`,
// `connectID`) are bigint everywhere: Go picks `random` with rand.Int63(), so
// it can be as large as 2^63-1 and must be echoed bit-exact.

export const PACKET_TYPE_NUMBERS = {
  DIAL_REQ: 0,
  DIAL_RSP: 1,
  CLOSE_REQ: 2,
  CLOSE_RSP: 3,
  DATA: 4,
  DIAL_CLS: 5,
  DRAIN: 6,
  /** yurt-tunnel extension (proto/yurttunnel_ext.proto), only after both ends announced it. */
  WINDOW_UPDATE: 100,
  CLOSE_WRITE: 101,
} as const;

export type PacketTypeName = keyof typeof PACKET_TYPE_NUMBERS;

export interface DialRequestPacket {
  type: 'DIAL_REQ';
  protocol: string;
  address: string;
  random: bigint;
}

export interface DialResponsePacket {
  type: 'DIAL_RSP';
  error: string;
  connectID: bigint;
  random: bigint;
}

export interface CloseRequestPacket {
  type: 'CLOSE_REQ';
  connectID: bigint;
  /**
   * yurt-tunnel extension (field 2, proto/yurttunnel_ext.proto), sent only to
   * agents that negotiated half-close: the connection ended by a failure, so
   * the agent resets its target instead of closing it. Absent: a normal close.
   */
  error?: string;
}

export interface CloseResponsePacket {
  type: 'CLOSE_RSP';
  error: string;
  connectID: bigint;
}

export interface DataPacket {
  type: 'DATA';
  connectID: bigint;
  error: string;
  data: Buffer;
}

export interface CloseDialPacket {
  type: 'DIAL_CLS';
  random: bigint;
}

export interface DrainPacket {
  type: 'DRAIN';
}

/** Grants the peer `bytes` more DATA on a connection (yurt-tunnel flow control). */
export interface WindowUpdatePacket {
  type: 'WINDOW_UPDATE';
  connectID: bigint;
  bytes: bigint;
}

/** The sender will send no more DATA on a connection; it still reads (yurt-tunnel half-close). */
export interface CloseWritePacket {
  type: 'CLOSE_WRITE';
  connectID: bigint;
}

/** A packet whose type number this implementation does not know. */
export interface UnknownPacket {
  type: 'UNKNOWN';
  typeNumber: number;
}

export type KnownPacket =
  | DialRequestPacket
  | DialResponsePacket
  | CloseRequestPacket
  | CloseResponsePacket
  | DataPacket
  | CloseDialPacket
  | DrainPacket
  | WindowUpdatePacket
  | CloseWritePacket;

export type Packet = KnownPacket | UnknownPacket;

const NAMES_BY_NUMBER: ReadonlyMap<number, PacketTypeName> = new Map(Object.entries(PACKET_TYPE_NUMBERS).map(([name, n]) => [n, name as PacketTypeName]));

export function packetTypeName(typeNumber: number): PacketTypeName | undefined {
  return NAMES_BY_NUMBER.get(typeNumber);
}

/** A short description for logs: never includes payload bytes. */
export function describePacket(p: Packet): Record<string, string | number> {
  switch (p.type) {
    case 'DIAL_REQ':
      return { type: p.type, dialAddress: p.address, dialID: p.random.toString() };
    case 'DIAL_RSP':
      return { type: p.type, dialID: p.random.toString(), connectID: p.connectID.toString(), error: p.error };
    case 'CLOSE_REQ':
      return { type: p.type, connectID: p.connectID.toString(), ...(p.error ? { error: p.error } : {}) };
    case 'CLOSE_RSP':
      return { type: p.type, connectID: p.connectID.toString(), error: p.error };
    case 'DATA':
      return { type: p.type, connectID: p.connectID.toString(), bytes: p.data.length };
    case 'DIAL_CLS':
      return { type: p.type, dialID: p.random.toString() };
    case 'DRAIN':
      return { type: p.type };
    case 'WINDOW_UPDATE':
      return { type: p.type, connectID: p.connectID.toString(), bytes: p.bytes.toString() };
    case 'CLOSE_WRITE':
      return { type: p.type, connectID: p.connectID.toString() };
    case 'UNKNOWN':
      return { type: p.type, typeNumber: p.typeNumber };
  }
}

/**
 * The `default` of a switch on a packet's type: it does not compile while a
 * type of the union has no case of its own, so a new packet type cannot pass
 * through a switch unnoticed. Should one get here at run time (a bug), its
 * name is returned for the log line that ignores it.
 */
export function unhandledPacketType(type: never): string {
  return String(type);
}
