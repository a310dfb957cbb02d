// Protobuf encoding of the Konnectivity Packet, written by hand.
//
// Why by hand: DATA is the hot path and is encoded as a small header followed
// by the payload, so the payload is never copied; it is decoded to a
// zero-copy subarray. The other packets are tiny and rare; encoding them the
// same way keeps one codec. test/unit/codec.test.ts checks every packet type
// against protobufjs reading proto/*.proto, which stay the source of truth.
//
// Decoding is in decode.ts; the wire types and field numbers here serve both.

import { InternalError } from './errors.js';
import { PACKET_TYPE_NUMBERS, type KnownPacket } from './packet.js';

export const WIRE_VARINT = 0;
export const WIRE_FIXED64 = 1;
export const WIRE_BYTES = 2;
export const WIRE_FIXED32 = 5;

// Field numbers of Packet's oneof `payload`.
export const FIELD_DIAL_REQUEST = 2;
const FIELD_DIAL_RESPONSE = 3;
export const FIELD_DATA = 4;
const FIELD_CLOSE_REQUEST = 5;
const FIELD_CLOSE_RESPONSE = 6;
const FIELD_CLOSE_DIAL = 7;
export const FIELD_DRAIN = 8;
/** yurt-tunnel extension: WindowUpdate (proto/yurttunnel_ext.proto). */
export const FIELD_WINDOW_UPDATE = 100;
/** yurt-tunnel extension: CloseWrite (half-close). */
export const FIELD_CLOSE_WRITE = 101;

export const PAYLOAD_FIELD_BY_TYPE: Record<KnownPacket['type'], number> = {
  DIAL_REQ: FIELD_DIAL_REQUEST,
  DIAL_RSP: FIELD_DIAL_RESPONSE,
  DATA: FIELD_DATA,
  CLOSE_REQ: FIELD_CLOSE_REQUEST,
  CLOSE_RSP: FIELD_CLOSE_RESPONSE,
  DIAL_CLS: FIELD_CLOSE_DIAL,
  DRAIN: FIELD_DRAIN,
  WINDOW_UPDATE: FIELD_WINDOW_UPDATE,
  CLOSE_WRITE: FIELD_CLOSE_WRITE,
};

const INT64_MIN = -(1n << 63n);
const INT64_MAX = (1n << 63n) - 1n;

// ---------------------------------------------------------------- encoding

/** A field to write: varint (int64/enum), string or bytes. Defaults are omitted, as proto3 does. */
type Field = { no: number; kind: 'int64'; value: bigint } | { no: number; kind: 'string'; value: string } | { no: number; kind: 'bytes'; value: Buffer };

function varintSize(v: bigint): number {
  let u = BigInt.asUintN(64, v);
  let n = 1;
  while (u >= 0x80n) {
    u >>= 7n;
    n++;
  }
  return n;
}

function smallVarintSize(v: number): number {
  let n = 1;
  while (v >= 0x80) {
    v = Math.floor(v / 128);
    n++;
  }
  return n;
}

function writeSmallVarint(buf: Buffer, pos: number, v: number): number {
  while (v >= 0x80) {
    buf[pos++] = (v & 0x7f) | 0x80;
    v = Math.floor(v / 128);
  }
  buf[pos++] = v;
  return pos;
}

function writeVarint(buf: Buffer, pos: number, v: bigint): number {
  if (v >= 0n && v <= BigInt(Number.MAX_SAFE_INTEGER)) return writeSmallVarint(buf, pos, Number(v));
  let u = BigInt.asUintN(64, v);
  while (u >= 0x80n) {
    buf[pos++] = Number(u & 0x7fn) | 0x80;
    u >>= 7n;
  }
  buf[pos++] = Number(u);
  return pos;
}

function checkInt64(v: bigint, name: string): void {
  if (v < INT64_MIN || v > INT64_MAX) {
    throw new RangeError(`${name} ${v} does not fit in int64`);
  }
}

function fieldSize(f: Field): number {
  switch (f.kind) {
    case 'int64':
      return f.value === 0n ? 0 : 1 + varintSize(f.value);
    case 'string': {
      if (f.value.length === 0) return 0;
      const len = Buffer.byteLength(f.value, 'utf8');
      return 1 + smallVarintSize(len) + len;
    }
    case 'bytes':
      return f.value.length === 0 ? 0 : 1 + smallVarintSize(f.value.length) + f.value.length;
  }
}

function writeField(buf: Buffer, pos: number, f: Field): number {
  switch (f.kind) {
    case 'int64':
      if (f.value === 0n) return pos;
      buf[pos++] = (f.no << 3) | WIRE_VARINT;
      return writeVarint(buf, pos, f.value);
    case 'string': {
      if (f.value.length === 0) return pos;
      buf[pos++] = (f.no << 3) | WIRE_BYTES;
      const len = Buffer.byteLength(f.value, 'utf8');
      pos = writeSmallVarint(buf, pos, len);
      return pos + buf.write(f.value, pos, 'utf8');
    }
    case 'bytes':
      if (f.value.length === 0) return pos;
      buf[pos++] = (f.no << 3) | WIRE_BYTES;
      pos = writeSmallVarint(buf, pos, f.value.length);
      f.value.copy(buf, pos);
      return pos + f.value.length;
  }
}

function payloadFields(p: KnownPacket): Field[] {
  switch (p.type) {
    case 'DIAL_REQ':
      checkInt64(p.random, 'random');
      return [
        { no: 1, kind: 'string', value: p.protocol },
        { no: 2, kind: 'string', value: p.address },
        { no: 3, kind: 'int64', value: p.random },
      ];
    case 'DIAL_RSP':
      checkInt64(p.random, 'random');
      checkInt64(p.connectID, 'connectID');
      return [
        { no: 1, kind: 'string', value: p.error },
        { no: 2, kind: 'int64', value: p.connectID },
        { no: 3, kind: 'int64', value: p.random },
      ];
    case 'CLOSE_REQ':
      checkInt64(p.connectID, 'connectID');
      return [
        { no: 1, kind: 'int64', value: p.connectID },
        { no: 2, kind: 'string', value: p.error ?? '' },
      ];
    case 'CLOSE_RSP':
      checkInt64(p.connectID, 'connectID');
      return [
        { no: 1, kind: 'string', value: p.error },
        { no: 2, kind: 'int64', value: p.connectID },
      ];
    case 'DATA':
      checkInt64(p.connectID, 'connectID');
      return [
        { no: 1, kind: 'int64', value: p.connectID },
        { no: 2, kind: 'string', value: p.error },
        { no: 3, kind: 'bytes', value: p.data },
      ];
    case 'DIAL_CLS':
      checkInt64(p.random, 'random');
      return [{ no: 1, kind: 'int64', value: p.random }];
    case 'DRAIN':
      return [];
    case 'WINDOW_UPDATE':
      checkInt64(p.connectID, 'connectID');
      checkInt64(p.bytes, 'bytes');
      if (p.received !== undefined) checkInt64(p.received, 'received');
      return [
        { no: 1, kind: 'int64', value: p.connectID },
        { no: 2, kind: 'int64', value: p.bytes },
        { no: 3, kind: 'int64', value: p.received ?? 0n },
      ];
    case 'CLOSE_WRITE':
      checkInt64(p.connectID, 'connectID');
      return [{ no: 1, kind: 'int64', value: p.connectID }];
  }
}

/**
 * Encodes a packet to its protobuf bytes (without gRPC framing). `reserve`
 * leaves that many bytes free at the start, for a framing prefix, so the
 * framed message is one buffer.
 */
export function encodePacket(p: KnownPacket, reserve = 0): Buffer {
  if (p.type === 'DATA' && p.error === '') {
    const header = encodeDataHeader(p.connectID, p.data.length, reserve, p.data.length);
    p.data.copy(header, header.length - p.data.length);
    return header;
  }
  const typeNumber = PACKET_TYPE_NUMBERS[p.type];
  const fields = payloadFields(p);
  let payloadLen = 0;
  for (const f of fields) payloadLen += fieldSize(f);
  const typeLen = typeNumber === 0 ? 0 : 1 + smallVarintSize(typeNumber);
  const payloadTag = (PAYLOAD_FIELD_BY_TYPE[p.type] << 3) | WIRE_BYTES;
  const total = reserve + typeLen + smallVarintSize(payloadTag) + smallVarintSize(payloadLen) + payloadLen;
  const buf = Buffer.allocUnsafe(total);
  let pos = reserve;
  if (typeNumber !== 0) {
    buf[pos++] = (1 << 3) | WIRE_VARINT;
    pos = writeSmallVarint(buf, pos, typeNumber);
  }
  // The oneof member is always written, even when empty (as Go does).
  pos = writeSmallVarint(buf, pos, payloadTag);
  pos = writeSmallVarint(buf, pos, payloadLen);
  for (const f of fields) pos = writeField(buf, pos, f);
  if (pos !== total) throw new InternalError(`codec bug: wrote ${pos} of ${total} bytes`);
  return buf;
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * The protobuf bytes of a DATA packet up to, not including, the payload.
 * `Buffer.concat([encodeDataHeader(id, data.length), data])` is the whole packet;
 * writing the two separately avoids copying the payload. `reserve` leaves
 * that many bytes free at the start, for a framing prefix; `room` that many
 * at the end, for a caller that copies a small payload in (one buffer, one
 * HTTP/2 frame).
 */
export function encodeDataHeader(connectID: bigint, dataLength: number, reserve = 0, room = 0): Buffer {
  const buf = Buffer.allocUnsafe(reserve + dataHeaderLength(connectID, dataLength) + room);
  writeDataHeader(buf, reserve, connectID, dataLength);
  return buf;
}

/** The length of what encodeDataHeader(connectID, dataLength) returns (with no reserve or room). */
export function dataHeaderLength(connectID: bigint, dataLength: number): number {
  const idLen = dataIdLength(connectID);
  const dataFieldLen = dataLength === 0 ? 0 : 1 + smallVarintSize(dataLength) + dataLength;
  return 2 + 1 + smallVarintSize(idLen + dataFieldLen) + idLen + (dataLength === 0 ? 0 : 1 + smallVarintSize(dataLength));
}

/**
 * Writes the header of a DATA packet into `buf` at `pos` (which has room for
 * dataHeaderLength bytes); returns where the payload goes. For a caller whose
 * payload already sits in one buffer behind free room: the packet is then one
 * buffer, without a copy.
 */
export function writeDataHeader(buf: Buffer, pos: number, connectID: bigint, dataLength: number): number {
  // Connection IDs are small counters: size them with number arithmetic, not BigInt.
  const small = connectID >= 0n && connectID <= MAX_SAFE;
  const id = small ? Number(connectID) : 0;
  const idLen = dataIdLength(connectID);
  const dataFieldLen = dataLength === 0 ? 0 : 1 + smallVarintSize(dataLength) + dataLength;
  buf[pos++] = (1 << 3) | WIRE_VARINT;
  buf[pos++] = PACKET_TYPE_NUMBERS.DATA;
  buf[pos++] = (FIELD_DATA << 3) | WIRE_BYTES;
  pos = writeSmallVarint(buf, pos, idLen + dataFieldLen);
  if (connectID !== 0n) {
    buf[pos++] = (1 << 3) | WIRE_VARINT;
    pos = small ? writeSmallVarint(buf, pos, id) : writeVarint(buf, pos, connectID);
  }
  if (dataLength !== 0) {
    buf[pos++] = (3 << 3) | WIRE_BYTES;
    pos = writeSmallVarint(buf, pos, dataLength);
  }
  return pos;
}

/** Bytes of the connectID field of a DATA payload (none for 0); throws for a value outside int64. */
function dataIdLength(connectID: bigint): number {
  if (connectID === 0n) return 0;
  if (connectID >= 0n && connectID <= MAX_SAFE) return 1 + smallVarintSize(Number(connectID));
  checkInt64(connectID, 'connectID');
  return 1 + varintSize(connectID);
}
