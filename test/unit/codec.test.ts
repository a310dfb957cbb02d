// Our hand-written codec against protobufjs reading proto/*.proto, the
// source of truth: same bytes out, same packets in.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { test } from 'node:test';
import protobuf from 'protobufjs';
import { dataHeaderLength, encodeDataHeader, encodePacket, writeDataHeader } from '../../pkg/protocol/codec.js';
import { decodePacket, MAX_SKIPPED_BYTES } from '../../pkg/protocol/decode.js';
import { newDialID } from '../../pkg/protocol/ids.js';
import { ProtocolError } from '../../pkg/protocol/errors.js';
import { GrpcDeframer, grpcFrameHeader, type MessageBuffers } from '../../pkg/grpc/frame.js';
import type { KnownPacket } from '../../pkg/protocol/packet.js';
import { PROTO_DIR } from '../support/upstream.js';

const root = protobuf.loadSync(join(PROTO_DIR, 'client.proto'));
const PacketType = root.lookupType('Packet');
const ExtPacketType = protobuf.loadSync(join(PROTO_DIR, 'yurttunnel_ext.proto')).lookupType('ExtPacket');

const MAX = (1n << 63n) - 1n;
const MIN = -(1n << 63n);

/** Our packet in protobufjs object form (int64 as decimal strings). */
function toReference(p: KnownPacket): Record<string, unknown> {
  switch (p.type) {
    case 'DIAL_REQ':
      return { type: 0, dialRequest: { protocol: p.protocol, address: p.address, random: p.random.toString() } };
    case 'DIAL_RSP':
      return { type: 1, dialResponse: { error: p.error, connectID: p.connectID.toString(), random: p.random.toString() } };
    case 'CLOSE_REQ':
      return { type: 2, closeRequest: { connectID: p.connectID.toString(), ...(p.error !== undefined ? { error: p.error } : {}) } };
    case 'CLOSE_RSP':
      return { type: 3, closeResponse: { error: p.error, connectID: p.connectID.toString() } };
    case 'DATA':
      return { type: 4, data: { connectID: p.connectID.toString(), error: p.error, data: p.data } };
    case 'DIAL_CLS':
      return { type: 5, closeDial: { random: p.random.toString() } };
    case 'DRAIN':
      return { type: 6, drain: {} };
    case 'WINDOW_UPDATE':
      return {
        type: 100,
        windowUpdate: {
          connectID: p.connectID.toString(),
          bytes: p.bytes.toString(),
          ...(p.received !== undefined ? { received: p.received.toString() } : {}),
        },
      };
    case 'CLOSE_WRITE':
      return { type: 101, closeWrite: { connectID: p.connectID.toString() } };
  }
}

/** Drops proto3 default values: protobufjs writes fields that are set even when default, Go does not. */
function withoutDefaults(o: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) {
    if (v === '' || v === '0' || v === 0 || (Buffer.isBuffer(v) && v.length === 0)) continue;
    out[k] = typeof v === 'object' && v !== null && !Buffer.isBuffer(v) ? withoutDefaults(v as Record<string, unknown>) : v;
  }
  return out;
}

function referenceEncode(p: KnownPacket): Buffer {
  const ext = p.type === 'WINDOW_UPDATE' || p.type === 'CLOSE_WRITE' || (p.type === 'CLOSE_REQ' && p.error !== undefined);
  const T = ext ? ExtPacketType : PacketType;
  return Buffer.from(T.encode(T.fromObject(withoutDefaults(toReference(p)))).finish());
}

const SAMPLES: KnownPacket[] = [
  { type: 'DIAL_REQ', protocol: 'tcp', address: '10.0.0.5:10250', random: MAX },
  { type: 'DIAL_REQ', protocol: 'tcp', address: '[fd00::1]:10250', random: 1n },
  { type: 'DIAL_REQ', protocol: '', address: '', random: 0n },
  { type: 'DIAL_RSP', error: '', connectID: 1n, random: MAX },
  { type: 'DIAL_RSP', error: 'dial tcp 10.0.0.5:10250: connect: connection refused', connectID: 0n, random: 12345n },
  { type: 'DIAL_RSP', error: 'ünïcödé ✓', connectID: MAX, random: MIN },
  { type: 'CLOSE_REQ', connectID: 42n },
  { type: 'CLOSE_REQ', connectID: 0n },
  { type: 'CLOSE_REQ', connectID: 42n, error: 'read ECONNRESET' },
  { type: 'CLOSE_RSP', error: '', connectID: MAX },
  { type: 'CLOSE_RSP', error: 'Unknown connectID', connectID: 7n },
  { type: 'DATA', connectID: 1n, error: '', data: Buffer.from('hello') },
  { type: 'DATA', connectID: MAX, error: '', data: randomBytes(70_000) },
  { type: 'DATA', connectID: 3n, error: '', data: Buffer.alloc(0) },
  { type: 'DATA', connectID: -1n, error: 'never set in practice', data: Buffer.from([0, 1, 2]) },
  { type: 'DIAL_CLS', random: MAX },
  { type: 'DRAIN' },
  { type: 'WINDOW_UPDATE', connectID: 3n, bytes: 524_288n },
  { type: 'WINDOW_UPDATE', connectID: MAX, bytes: 1n },
  { type: 'WINDOW_UPDATE', connectID: 3n, bytes: 65_536n, received: 1n },
  { type: 'WINDOW_UPDATE', connectID: 0n, bytes: 0n, received: MAX },
  { type: 'CLOSE_WRITE', connectID: 7n },
  { type: 'CLOSE_WRITE', connectID: MAX },
];

test('every packet type encodes to the same bytes protobufjs makes from proto/client.proto', () => {
  for (const p of SAMPLES) {
    assert.deepEqual(
      encodePacket(p),
      referenceEncode(p),
      `${p.type} ${JSON.stringify(toReference(p), (_k, v: unknown) => (Buffer.isBuffer(v) ? `<${v.length} bytes>` : v))}`,
    );
  }
});

test('every packet type decodes from protobufjs bytes to what was encoded, int64 exact', () => {
  for (const p of SAMPLES) {
    assert.deepEqual(decodePacket(referenceEncode(p)), p);
  }
});

test('random = 2^63-1 survives encode and decode bit-exact', () => {
  const p: KnownPacket = { type: 'DIAL_REQ', protocol: 'tcp', address: 'a:1', random: 9223372036854775807n };
  const back = decodePacket(encodePacket(p));
  assert.equal(back.type, 'DIAL_REQ');
  assert.equal((back as { random: bigint }).random, 9223372036854775807n);
  const ref = PacketType.toObject(PacketType.decode(encodePacket(p)), { longs: String }) as { dialRequest: { random: string } };
  assert.equal(ref.dialRequest.random, '9223372036854775807');
});

test("CLOSE_REQ's error (our extension) is a field an upstream agent's parser skips", () => {
  const bytes = encodePacket({ type: 'CLOSE_REQ', connectID: 42n, error: 'read ECONNRESET' });
  // client.proto alone (what a Go agent compiles) reads the close request and ignores the error.
  const upstream = PacketType.toObject(PacketType.decode(bytes), { longs: String }) as { type: number; closeRequest: { connectID: string } };
  assert.equal(upstream.type, 2);
  assert.equal(upstream.closeRequest.connectID, '42');
  // Without an error the packet is byte for byte what upstream sends.
  assert.deepEqual(encodePacket({ type: 'CLOSE_REQ', connectID: 42n, error: '' }), referenceEncode({ type: 'CLOSE_REQ', connectID: 42n }));
});

test('a DIAL_REQ has no type field on the wire (proto3 omits the zero enum)', () => {
  const bytes = encodePacket({ type: 'DIAL_REQ', protocol: 'tcp', address: 'h:1', random: 5n });
  assert.equal(bytes[0], (2 << 3) | 2, 'starts with the dialRequest field');
});

test('out-of-range int64 values are refused when encoding', () => {
  assert.throws(() => encodePacket({ type: 'CLOSE_REQ', connectID: MAX + 1n }), {
    name: 'RangeError',
    message: 'connectID 9223372036854775808 does not fit in int64',
  });
});

test('DATA decodes to a view of the message buffer, without copying', () => {
  const payload = Buffer.from('zero copy');
  const bytes = encodePacket({ type: 'DATA', connectID: 9n, error: '', data: payload });
  const p = decodePacket(bytes);
  assert.equal(p.type, 'DATA');
  const data = (p as { data: Buffer }).data;
  assert.equal(data.buffer, bytes.buffer);
  assert.equal(data.toString(), 'zero copy');
});

test('encodeDataHeader + payload is the whole DATA packet, with room reserved in front', () => {
  const payload = randomBytes(300);
  const header = encodeDataHeader(77n, payload.length, 5);
  assert.deepEqual(Buffer.concat([header.subarray(5), payload]), referenceEncode({ type: 'DATA', connectID: 77n, error: '', data: payload }));
});

test('unknown fields are skipped; unknown types decode as UNKNOWN with their number', () => {
  const withExtra = Buffer.concat([
    encodePacket({ type: 'CLOSE_REQ', connectID: 5n }),
    Buffer.from([(9 << 3) | 0, 1]), // varint field 9
    Buffer.from([(10 << 3) | 2, 2, 0xaa, 0xbb]), // bytes field 10
    Buffer.from([(11 << 3) | 5, 1, 2, 3, 4]), // fixed32 field 11
    Buffer.from([(12 << 3) | 1, 1, 2, 3, 4, 5, 6, 7, 8]), // fixed64 field 12
    Buffer.from([0x80, 0x01, 7]), // varint field 16, a two-byte tag
  ]);
  assert.deepEqual(decodePacket(withExtra), { type: 'CLOSE_REQ', connectID: 5n });
  assert.deepEqual(decodePacket(Buffer.from([0x08, 9])), { type: 'UNKNOWN', typeNumber: 9 });
  // A negative enum arrives sign-extended to 10 bytes.
  assert.deepEqual(decodePacket(Buffer.from([0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])), {
    type: 'UNKNOWN',
    typeNumber: -1,
  });
});

test('a payload that does not match the type reads as empty, as Go receivers see it', () => {
  const mismatched = Buffer.from(PacketType.encode(PacketType.fromObject({ type: 4, closeRequest: { connectID: '3' } })).finish());
  assert.deepEqual(decodePacket(mismatched), { type: 'DATA', connectID: 0n, error: '', data: Buffer.alloc(0) });
});

test('malformed bytes raise a ProtocolError with a code', () => {
  const cases: Array<[number[], string, string]> = [
    [[0x22, 10, 0x08], 'YT_ERR_PROTOCOL_TRUNCATED', 'malformed packet: truncated field'],
    [[0x08, 0x80, 0x80], 'YT_ERR_PROTOCOL_TRUNCATED', 'malformed packet: truncated field'],
    [[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], 'YT_ERR_PROTOCOL_VARINT', 'malformed packet: varint longer than 10 bytes'],
    [[0x0b], 'YT_ERR_PROTOCOL_WIRE_TYPE', 'malformed packet: unsupported wire type 3'],
    [[0x00, 0x01], 'YT_ERR_PROTOCOL_TAG', 'malformed packet: field number 0'],
  ];
  for (const [bytes, code, message] of cases) {
    assert.throws(
      () => decodePacket(Buffer.from(bytes)),
      (err: unknown) => {
        assert.ok(err instanceof ProtocolError);
        assert.equal(err.code, code);
        assert.equal(err.message, message);
        return true;
      },
    );
  }
});

/** A length-delimited field `no` of `n` bytes, for padding packets with what the decoder skips. */
function bytesField(no: number, n: number): Buffer {
  const len: number[] = [];
  for (let v = n; ; v = Math.floor(v / 128)) {
    if (v < 128) {
      len.push(v);
      break;
    }
    len.push((v & 0x7f) | 0x80);
  }
  return Buffer.concat([Buffer.from([(no << 3) | 2]), Buffer.from(len), Buffer.alloc(n, 0x5a)]);
}

test('a packet that is mostly fields it does not use is refused with YT_ERR_PROTOCOL_PADDING; up to MAX_SKIPPED_BYTES, or as many as it uses, are skipped', () => {
  const one = encodePacket({ type: 'DATA', connectID: 7n, error: '', data: Buffer.from('x') });
  const refused = (bytes: Buffer, name: string): void =>
    assert.throws(
      () => decodePacket(bytes),
      (err: unknown) => err instanceof ProtocolError && err.code === 'YT_ERR_PROTOCOL_PADDING',
      name,
    );
  const accepted = (bytes: Buffer, name: string): void => assert.doesNotThrow(() => decodePacket(bytes), name);
  // One byte of payload: its wrapper (2 bytes) and the pad field's tag and length (3) count as unused.
  accepted(Buffer.concat([one, bytesField(15, MAX_SKIPPED_BYTES - 5)]), 'an unknown field just under the limit');
  refused(Buffer.concat([one, bytesField(15, MAX_SKIPPED_BYTES - 4)]), 'an unknown field one byte over');
  assert.throws(() => decodePacket(Buffer.concat([one, bytesField(15, 16_000)])), {
    name: 'ProtocolError',
    code: 'YT_ERR_PROTOCOL_PADDING',
    message:
      'malformed packet: 16005 of its 16012 bytes are fields it does not use (unknown, or repeated and superseded); at most 1024, or as many as it uses, are accepted',
  });
  // Padding inside the Data message, a `data` field replaced by a later one, repeated empty payloads or type fields, another oneof member.
  const inner = (fields: Buffer): Buffer =>
    Buffer.concat([Buffer.from([0x08, 0x04, 0x22]), Buffer.from([(fields.length & 0x7f) | 0x80, fields.length >> 7]), fields]);
  refused(inner(Buffer.concat([Buffer.from([0x08, 0x07]), bytesField(9, 4000), Buffer.from([0x1a, 0x01, 0x78])])), 'an unknown field inside Data');
  refused(inner(Buffer.concat([bytesField(3, 4000), Buffer.from([0x1a, 0x01, 0x78])])), 'a 4000-byte data field replaced by a 1-byte one');
  refused(Buffer.concat([one, Buffer.alloc(2000, 0).map((_, i) => (i % 2 === 0 ? 0x22 : 0))]), 'a thousand empty Data members merged');
  refused(Buffer.concat([one, Buffer.alloc(2000, 0).map((_, i) => (i % 2 === 0 ? 0x08 : 4))]), 'the type a thousand times');
  refused(Buffer.concat([bytesField(2, 2000), Buffer.from([0x08, 0x04])]), 'a DIAL_REQ member on a DATA packet');
  // Large unknown fields next to a larger payload, and packets of an unknown type, are read.
  const big = encodePacket({ type: 'DATA', connectID: 7n, error: '', data: Buffer.alloc(8000, 1) });
  accepted(Buffer.concat([big, bytesField(15, 4000)]), 'padding smaller than the payload');
  assert.deepEqual(decodePacket(Buffer.concat([Buffer.from([0x08, 50]), bytesField(200, 16_000)])), { type: 'UNKNOWN', typeNumber: 50 });
  // Go peers write no field we skip: every sample, as protobufjs writes it from the .proto, is read.
  for (const p of SAMPLES) accepted(referenceEncode(p), p.type);
});

test('random garbage never throws anything but ProtocolError', () => {
  for (let i = 0; i < 5000; i++) {
    const bytes = randomBytes(1 + (i % 64));
    try {
      decodePacket(bytes);
    } catch (err: unknown) {
      assert.ok(err instanceof ProtocolError, `input ${bytes.toString('hex')} threw ${String(err)}`);
    }
  }
});

test('the gRPC deframer finds every message however the stream is cut', () => {
  const messages = SAMPLES.map(encodePacket);
  const stream = Buffer.concat(messages.flatMap((m) => [grpcFrameHeader(m.length), m]));
  for (const cut of [1, 2, 3, 5, 7, 64, 1000, 65_536]) {
    const d = new GrpcDeframer();
    const got: Buffer[] = [];
    for (let off = 0; off < stream.length; off += cut) got.push(...d.push(stream.subarray(off, off + cut)));
    assert.equal(got.length, messages.length, `cut ${cut}`);
    got.forEach((m, i) => assert.ok(m.equals(messages[i]!), `cut ${cut} message ${i}`));
    assert.equal(d.bufferedLength, 0);
  }
});

test('the gRPC deframer handles empty messages and headers split across chunks', () => {
  const stream = Buffer.concat([grpcFrameHeader(0), grpcFrameHeader(3), Buffer.from('abc'), grpcFrameHeader(0)]);
  for (let cut = 1; cut <= stream.length; cut++) {
    const d = new GrpcDeframer();
    const got: string[] = [];
    for (let off = 0; off < stream.length; off += cut) got.push(...d.push(stream.subarray(off, off + cut)).map((m) => m.toString()));
    assert.deepEqual(got, ['', 'abc', ''], `cut ${cut}`);
  }
});

test('the gRPC deframer joins messages that span chunks in buffers from its allocator, and gives back one left unfinished', () => {
  const taken: Buffer[] = [];
  const dropped: Buffer[] = [];
  const buffers: MessageBuffers = {
    take: (n) => {
      const b = Buffer.alloc(n + 8).subarray(4, 4 + n);
      taken.push(b);
      return b;
    },
    drop: (b) => dropped.push(b),
  };
  const d = new GrpcDeframer(1024, buffers);
  const got: Array<[string, boolean]> = [];
  const push = (bytes: Buffer): void => d.forEach(bytes, (m, joined) => got.push([m.toString(), joined]));
  // "ab" whole in the chunk; "cdef" cut after "cd"; then the start of "gh".
  push(Buffer.concat([grpcFrameHeader(2), Buffer.from('ab'), grpcFrameHeader(4), Buffer.from('cd')]));
  push(Buffer.concat([Buffer.from('ef'), grpcFrameHeader(2), Buffer.from('g')]));
  assert.deepEqual(got, [
    ['ab', false],
    ['cdef', true],
  ]);
  assert.equal(taken.length, 2, 'one buffer per message that spanned chunks, the unfinished one included');
  assert.equal(got.length, 2);
  assert.equal(taken[0]!.toString(), 'cdef', 'joined in the very buffer it was given');
  assert.deepEqual(dropped, []);
  d.close();
  assert.deepEqual(dropped, [taken[1]], 'the unfinished message goes back on close');
  d.close();
  assert.equal(dropped.length, 1, 'once');
  assert.throws(() => d.push(Buffer.from('h')), { code: 'YT_ERR_INTERNAL' });
});

test('the gRPC deframer refuses compressed and oversized messages', () => {
  assert.throws(() => new GrpcDeframer().push(Buffer.from([1, 0, 0, 0, 1, 0])), { code: 'YT_ERR_PROTOCOL_COMPRESSED' });
  assert.throws(() => new GrpcDeframer(1024).push(Buffer.from([0, 0, 0, 4, 1])), {
    code: 'YT_ERR_PROTOCOL_TOO_LARGE',
    message: 'gRPC message of 1025 bytes exceeds the limit of 1024 bytes',
  });
  assert.throws(() => new GrpcDeframer().push(Buffer.from([7, 0, 0, 0, 0])), { code: 'YT_ERR_PROTOCOL_FRAME' });
});

test('encodePacket leaves the room asked for in front, so a framed message is one buffer', () => {
  for (const p of SAMPLES) {
    const framed = encodePacket(p, 5);
    assert.deepEqual(framed.subarray(5), encodePacket(p), p.type);
  }
});

test('DATA in any field layout decodes as protobufjs reads it (the canonical layout has a fast path)', () => {
  const variants: Array<[string, Buffer]> = [];
  const data = (fields: Record<string, unknown>): Buffer => Buffer.from(PacketType.encode(PacketType.fromObject({ type: 4, data: fields })).finish());
  for (const id of ['0', '1', '127', '128', String(2 ** 49 - 1), String(2 ** 49), String(2 ** 53), MAX.toString(), '-1', MIN.toString()]) {
    for (const size of [0, 1, 127, 128, 70_000]) variants.push([`id ${id} size ${size}`, data({ connectID: id, data: randomBytes(size) })]);
  }
  const canonical = data({ connectID: '9', data: Buffer.from('xyz') });
  variants.push(
    ['with an error', data({ connectID: '9', error: 'broken', data: Buffer.from('xyz') })],
    ['type after the payload', Buffer.concat([canonical.subarray(2), canonical.subarray(0, 2)])],
    ['payload field twice (the last wins)', Buffer.concat([canonical, data({ connectID: '10', data: Buffer.from('later') }).subarray(2)])],
    ['an unknown field inside', Buffer.from([0x08, 0x04, 0x22, 0x07, 0x08, 0x09, 0x20, 0x01, 0x1a, 0x01, 0x41])],
    [
      'connectID as a 10-byte varint',
      Buffer.from([0x08, 0x04, 0x22, 0x0e, 0x08, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0x1a, 0x01, 0x41]),
    ],
    ['data before connectID', Buffer.from([0x08, 0x04, 0x22, 0x05, 0x1a, 0x01, 0x41, 0x08, 0x02])],
  );
  for (const [name, bytes] of variants) {
    const ref = PacketType.toObject(PacketType.decode(bytes), { longs: String, defaults: true }) as {
      data: { connectID: string; error: string; data: Uint8Array };
    };
    assert.deepEqual(
      decodePacket(bytes),
      { type: 'DATA', connectID: BigInt(ref.data.connectID), error: ref.data.error, data: Buffer.from(ref.data.data) },
      name,
    );
  }
});

test('a truncated canonical DATA packet is refused, not read short', () => {
  const bytes = encodePacket({ type: 'DATA', connectID: 3n, error: '', data: Buffer.from('hello') });
  for (let cut = 3; cut < bytes.length; cut++) {
    assert.throws(() => decodePacket(bytes.subarray(0, cut)), { code: 'YT_ERR_PROTOCOL_TRUNCATED' }, `cut at ${cut}`);
  }
});

test('dial IDs drawn from the random pool are in [1, 2^63-1] and do not repeat', () => {
  const seen = new Set<bigint>();
  // Several refills of the 4 KiB pool.
  for (let i = 0; i < 3000; i++) {
    const id = newDialID();
    assert.ok(id >= 1n && id <= MAX, `dial ID ${id} out of range`);
    assert.ok(!seen.has(id), `dial ID ${id} repeated after ${i} draws`);
    seen.add(id);
  }
});

test("WINDOW_UPDATE's received (session resume) is absent from the bytes when unset, and read back exactly when set", () => {
  const plain = encodePacket({ type: 'WINDOW_UPDATE', connectID: 9n, bytes: 4096n });
  assert.deepEqual(encodePacket({ type: 'WINDOW_UPDATE', connectID: 9n, bytes: 4096n, received: 0n }), plain, 'a zero count is not written');
  assert.deepEqual(decodePacket(plain), { type: 'WINDOW_UPDATE', connectID: 9n, bytes: 4096n }, 'no received key at all when absent');
  for (const received of [1n, 127n, 128n, 2n ** 32n, 2n ** 49n, 2n ** 53n + 1n, MAX]) {
    const p: KnownPacket = { type: 'WINDOW_UPDATE', connectID: 9n, bytes: 4096n, received };
    assert.deepEqual(decodePacket(encodePacket(p)), p, `received ${received}`);
  }
  // An acknowledgement alone: connectID 0 and no bytes, only the count.
  const ack = encodePacket({ type: 'WINDOW_UPDATE', connectID: 0n, bytes: 0n, received: 300n });
  assert.deepEqual(ack, Buffer.from([0x08, 100, 0xa2, 0x06, 3, 0x18, 0xac, 0x02]));
  assert.deepEqual(decodePacket(ack), { type: 'WINDOW_UPDATE', connectID: 0n, bytes: 0n, received: 300n });
  assert.throws(() => encodePacket({ type: 'WINDOW_UPDATE', connectID: 1n, bytes: 1n, received: MAX + 1n }), {
    name: 'RangeError',
    message: 'received 9223372036854775808 does not fit in int64',
  });
});

test('a WINDOW_UPDATE with received, cut anywhere, is refused as truncated; split across gRPC chunks it arrives whole', () => {
  const p: KnownPacket = { type: 'WINDOW_UPDATE', connectID: 77n, bytes: 262_144n, received: 2n ** 40n + 5n };
  const bytes = encodePacket(p);
  for (let cut = 1; cut < bytes.length; cut++) {
    const head = bytes.subarray(0, cut);
    try {
      const got = decodePacket(head);
      // A cut right after a whole field is a shorter valid message: it must not invent a count.
      assert.ok(got.type !== 'WINDOW_UPDATE' || got.received === undefined || got.received === p.received, `cut at ${cut}`);
    } catch (err: unknown) {
      assert.ok(err instanceof ProtocolError, `cut at ${cut} threw ${String(err)}`);
      assert.equal(err.code, 'YT_ERR_PROTOCOL_TRUNCATED', `cut at ${cut}`);
    }
  }
  const stream = Buffer.concat([grpcFrameHeader(bytes.length), bytes, grpcFrameHeader(bytes.length), bytes]);
  for (let cut = 1; cut <= stream.length; cut++) {
    const d = new GrpcDeframer();
    const got: KnownPacket[] = [];
    for (let off = 0; off < stream.length; off += cut) for (const m of d.push(stream.subarray(off, off + cut))) got.push(decodePacket(m) as KnownPacket);
    assert.deepEqual(got, [p, p], `chunks of ${cut}`);
  }
});

test('received: the last one wins, one of the wrong wire type is skipped (as Go does), a malformed one is refused', () => {
  // windowUpdate { connectID: 5, received: 7, bytes: 9, received: 8, received as a length-delimited field }.
  const repeated = Buffer.from([0x08, 100, 0xa2, 0x06, 12, 0x08, 5, 0x18, 7, 0x10, 9, 0x18, 8, 0x1a, 2, 0xaa, 0xbb]);
  assert.deepEqual(decodePacket(repeated), { type: 'WINDOW_UPDATE', connectID: 5n, bytes: 9n, received: 8n });
  // received as an 11-byte varint.
  const tooLong = Buffer.from([0x08, 100, 0xa2, 0x06, 12, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
  assert.throws(() => decodePacket(tooLong), { code: 'YT_ERR_PROTOCOL_VARINT' });
  // The payload's length claims more than there is.
  assert.throws(() => decodePacket(Buffer.from([0x08, 100, 0xa2, 0x06, 9, 0x18, 1])), { code: 'YT_ERR_PROTOCOL_TRUNCATED' });
});

test('writeDataHeader writes, into room in front of a payload, the bytes encodeDataHeader returns', () => {
  for (const [id, n] of [
    [1n, 1],
    [300n, 65536],
    [0n, 10],
    [5n, 0],
    [-1n, 70000],
    [(1n << 62n) + 3n, 127],
  ] as const) {
    const expected = encodeDataHeader(id, n);
    assert.equal(dataHeaderLength(id, n), expected.length);
    const buf = Buffer.alloc(expected.length + 7);
    const end = writeDataHeader(buf, 7, id, n);
    assert.equal(end, buf.length);
    assert.deepEqual(buf.subarray(7), expected, `connectID ${id}, ${n} bytes`);
  }
});
