// Protobuf decoding of the Konnectivity Packet, written by hand (the encoder
// and the field numbers both use are in codec.ts). DATA, the hot path, is
// decoded to a zero-copy subarray of the message.
//
// Decoding follows proto3 semantics: absent fields take their defaults,
// unknown fields (and known fields with an unexpected wire type, as Go does)
// are skipped, and the payload used is the one that matches `type`. What is
// skipped is bounded, though (MAX_SKIPPED_BYTES): a packet that is mostly
// fields we throw away is refused.

import { ProtocolError } from './errors.js';
import { PACKET_TYPE_NUMBERS, packetTypeName, type DataPacket, type KnownPacket, type Packet } from './packet.js';
import {
  FIELD_CLOSE_WRITE,
  FIELD_DATA,
  FIELD_DIAL_REQUEST,
  FIELD_DRAIN,
  FIELD_WINDOW_UPDATE,
  PAYLOAD_FIELD_BY_TYPE,
  WIRE_BYTES,
  WIRE_FIXED32,
  WIRE_FIXED64,
  WIRE_VARINT,
} from './codec.js';

/**
 * Bytes of a packet that may go unused (unknown fields, oneof members that
 * lose to a later one, fields repeated and superseded) before it is refused,
 * unless the packet uses more than that. Go peers send none; a field added by
 * a later protocol version is a few bytes. Padding each 1-byte DATA with 16 KB
 * we skip only makes us read 16 KB, and kept the 16 KB its payload viewed
 * alive while the payload waited (buffer-pool.ts, holdable).
 */
export const MAX_SKIPPED_BYTES = 1024;

class Reader {
  pos: number;
  constructor(
    readonly buf: Buffer,
    start: number,
    readonly end: number,
  ) {
    this.pos = start;
  }

  /** A varint as bigint (int64 semantics: values >= 2^63 wrap to negative). */
  varint64(): bigint {
    const { buf } = this;
    // Fast path: up to 7 bytes (49 bits) fit a JS number exactly.
    let lo = 0;
    let mul = 1;
    for (let i = 0; i < 7; i++) {
      if (this.pos >= this.end) throw truncated();
      const b = buf[this.pos++]!;
      lo += (b & 0x7f) * mul;
      if (b < 0x80) return BigInt(lo);
      mul *= 128;
    }
    let v = BigInt(lo);
    let shift = 49n;
    for (let i = 7; i < 10; i++) {
      if (this.pos >= this.end) throw truncated();
      const b = buf[this.pos++]!;
      v |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) return BigInt.asIntN(64, v);
      shift += 7n;
    }
    throw new ProtocolError('YT_ERR_PROTOCOL_VARINT', 'malformed packet: varint longer than 10 bytes');
  }

  /** A varint used as a length or a tag: must fit a JS number. */
  varint32(): number {
    const v = this.varint64();
    if (v < 0n || v > 0xffffffffn) {
      throw new ProtocolError('YT_ERR_PROTOCOL_LENGTH', `malformed packet: length or tag ${v} out of range`);
    }
    return Number(v);
  }

  /** Returns [start, end) of a length-delimited field's bytes. */
  lengthDelimited(): [number, number] {
    const len = this.varint32();
    const start = this.pos;
    if (len > this.end - start) throw truncated();
    this.pos = start + len;
    return [start, this.pos];
  }

  skip(wireType: number): void {
    switch (wireType) {
      case WIRE_VARINT:
        this.varint64();
        return;
      case WIRE_FIXED64:
        this.advance(8);
        return;
      case WIRE_BYTES:
        this.lengthDelimited();
        return;
      case WIRE_FIXED32:
        this.advance(4);
        return;
      default:
        throw new ProtocolError('YT_ERR_PROTOCOL_WIRE_TYPE', `malformed packet: unsupported wire type ${wireType}`);
    }
  }

  private advance(n: number): void {
    if (this.end - this.pos < n) throw truncated();
    this.pos += n;
  }
}

function truncated(): ProtocolError {
  return new ProtocolError('YT_ERR_PROTOCOL_TRUNCATED', 'malformed packet: truncated field');
}

interface Fields {
  s1: string; // error / protocol
  s2: string; // address / Data.error / CloseRequest.error (our extension)
  i1: bigint; // field 1 as int64
  i2: bigint;
  i3: bigint; // also WindowUpdate.received (our resume extension)
  bytes3: Buffer | undefined;
  /** Bytes (tag included) of the occurrence of fields 1..3 that counts: the last. */
  len1: number;
  len2: number;
  len3: number;
}

/**
 * Parses one submessage. All our submessages use fields 1..3 only, so one
 * shape covers them: strings and int64s are read by the number and wire type
 * they arrive with; the caller picks what its message defines.
 */
function readSubmessage(buf: Buffer, start: number, end: number, out: Fields, schema: SubSchema): void {
  const r = new Reader(buf, start, end);
  while (r.pos < end) {
    const tagStart = r.pos;
    const tag = r.varint32();
    const no = tag >>> 3;
    const wt = tag & 7;
    const kind = schema[no];
    if (kind === 'int64' && wt === WIRE_VARINT) {
      const v = r.varint64();
      if (no === 1) out.i1 = v;
      else if (no === 2) out.i2 = v;
      else out.i3 = v;
    } else if (kind === 'string' && wt === WIRE_BYTES) {
      const [s, e] = r.lengthDelimited();
      const v = buf.toString('utf8', s, e);
      if (no === 1) out.s1 = v;
      else out.s2 = v;
    } else if (kind === 'bytes' && wt === WIRE_BYTES) {
      const [s, e] = r.lengthDelimited();
      out.bytes3 = buf.subarray(s, e);
    } else {
      r.skip(wt);
      continue;
    }
    const len = r.pos - tagStart;
    if (no === 1) out.len1 = len;
    else if (no === 2) out.len2 = len;
    else out.len3 = len;
  }
}

type SubSchema = Readonly<Record<number, 'int64' | 'string' | 'bytes'>>;

const SCHEMAS: Record<KnownPacket['type'], SubSchema> = {
  DIAL_REQ: { 1: 'string', 2: 'string', 3: 'int64' },
  DIAL_RSP: { 1: 'string', 2: 'int64', 3: 'int64' },
  CLOSE_REQ: { 1: 'int64', 2: 'string' },
  CLOSE_RSP: { 1: 'string', 2: 'int64' },
  DATA: { 1: 'int64', 2: 'string', 3: 'bytes' },
  DIAL_CLS: { 1: 'int64' },
  DRAIN: {},
  WINDOW_UPDATE: { 1: 'int64', 2: 'int64', 3: 'int64' },
  CLOSE_WRITE: { 1: 'int64' },
};

const EMPTY = Buffer.alloc(0);

/** A varint of at most 7 bytes (< 2^49) at `pos` (its end in shortVarintEnd), or -1 for anything else. */
function shortVarint(buf: Buffer, pos: number, end: number): number {
  let v = 0;
  let mul = 1;
  for (let i = 0; i < 7 && pos < end; i++) {
    const b = buf[pos++]!;
    v += (b & 0x7f) * mul;
    if (b < 0x80) {
      shortVarintEnd = pos;
      return v;
    }
    mul *= 128;
  }
  return -1;
}
/** Where the last shortVarint() ended (a module variable: no array per call on the hot path). */
let shortVarintEnd = 0;

/**
 * DATA as Go and we write it: type first, then one `data` field holding an
 * optional connectID and an optional payload, nothing else, in that order.
 * Anything else (an error string, repeated or unknown fields, long varints)
 * returns undefined and takes the general path, which gives the same answer
 * for these bytes; this one only skips its objects and arrays.
 */
function decodeCanonicalData(buf: Buffer): DataPacket | undefined {
  const end = buf.length;
  if (end < 4 || buf[0] !== ((1 << 3) | WIRE_VARINT) || buf[1] !== PACKET_TYPE_NUMBERS.DATA || buf[2] !== ((FIELD_DATA << 3) | WIRE_BYTES)) return undefined;
  const innerLen = shortVarint(buf, 3, end);
  let pos = shortVarintEnd;
  if (innerLen < 0 || pos + innerLen !== end) return undefined;
  let connectID = 0;
  if (pos < end && buf[pos] === ((1 << 3) | WIRE_VARINT)) {
    connectID = shortVarint(buf, pos + 1, end);
    if (connectID < 0) return undefined;
    pos = shortVarintEnd;
  }
  let data: Buffer = EMPTY;
  if (pos < end && buf[pos] === ((3 << 3) | WIRE_BYTES)) {
    const len = shortVarint(buf, pos + 1, end);
    if (len < 0) return undefined;
    pos = shortVarintEnd;
    if (pos + len !== end) return undefined;
    data = buf.subarray(pos, end);
    pos = end;
  }
  if (pos !== end) return undefined;
  return { type: 'DATA', connectID: BigInt(connectID), error: '', data };
}

/**
 * Decodes a packet's protobuf bytes. `data` of a DATA packet is a subarray of
 * `buf` (no copy): the caller must not reuse `buf`.
 */
export function decodePacket(buf: Buffer): Packet {
  const data = decodeCanonicalData(buf);
  if (data !== undefined) return data;
  const r = new Reader(buf, 0, buf.length);
  let typeNumber = 0;
  // The last payload field seen, as proto3 oneof semantics require.
  let payloadField = 0;
  const payloads: Array<[number, number]> = [];
  /** Bytes of the `type` field that counts (the last). */
  let typeFieldLength = 0;
  while (r.pos < buf.length) {
    const tagStart = r.pos;
    const tag = r.varint32();
    const no = tag >>> 3;
    const wt = tag & 7;
    if (no === 0) {
      throw new ProtocolError('YT_ERR_PROTOCOL_TAG', 'malformed packet: field number 0');
    }
    if (no === 1 && wt === WIRE_VARINT) {
      // Enums are int32 on the wire; negative ones arrive sign-extended.
      typeNumber = Number(BigInt.asIntN(32, r.varint64()));
      typeFieldLength = r.pos - tagStart;
    } else if (((no >= FIELD_DIAL_REQUEST && no <= FIELD_DRAIN) || no === FIELD_WINDOW_UPDATE || no === FIELD_CLOSE_WRITE) && wt === WIRE_BYTES) {
      const [s, e] = r.lengthDelimited();
      if (no !== payloadField) payloads.length = 0;
      payloadField = no;
      payloads.push([s, e]);
    } else {
      r.skip(wt);
    }
  }

  const name = packetTypeName(typeNumber);
  if (name === undefined) return { type: 'UNKNOWN', typeNumber };

  const f: Fields = { s1: '', s2: '', i1: 0n, i2: 0n, i3: 0n, bytes3: undefined, len1: 0, len2: 0, len3: 0 };
  // A Go receiver reads the payload that matches the type; any other oneof member reads as empty.
  const wanted = PAYLOAD_FIELD_BY_TYPE[name];
  if (payloadField === wanted) {
    for (const [s, e] of payloads) readSubmessage(buf, s, e, f, SCHEMAS[name]);
  }
  // Everything but the fields that make the packet was skipped: unknown fields, and repeated ones that lost to the last.
  const used = typeFieldLength + f.len1 + f.len2 + f.len3;
  const skipped = buf.length - used;
  if (skipped > MAX_SKIPPED_BYTES && skipped > used) {
    throw new ProtocolError(
      'YT_ERR_PROTOCOL_PADDING',
      `malformed packet: ${skipped} of its ${buf.length} bytes are fields it does not use (unknown, or repeated and superseded); ` +
        `at most ${MAX_SKIPPED_BYTES}, or as many as it uses, are accepted`,
    );
  }
  switch (name) {
    case 'DIAL_REQ':
      return { type: name, protocol: f.s1, address: f.s2, random: f.i3 };
    case 'DIAL_RSP':
      return { type: name, error: f.s1, connectID: f.i2, random: f.i3 };
    case 'CLOSE_REQ':
      return f.s2 === '' ? { type: name, connectID: f.i1 } : { type: name, connectID: f.i1, error: f.s2 };
    case 'CLOSE_RSP':
      return { type: name, error: f.s1, connectID: f.i2 };
    case 'DATA':
      return { type: name, connectID: f.i1, error: f.s2, data: f.bytes3 ?? EMPTY };
    case 'DIAL_CLS':
      return { type: name, random: f.i1 };
    case 'DRAIN':
      return { type: name };
    case 'WINDOW_UPDATE':
      return f.i3 === 0n ? { type: name, connectID: f.i1, bytes: f.i2 } : { type: name, connectID: f.i1, bytes: f.i2, received: f.i3 };
    case 'CLOSE_WRITE':
      return { type: name, connectID: f.i1 };
  }
}
