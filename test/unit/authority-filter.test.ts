// The egress socket's `:authority` filter as a parser: it reads each byte
// once, hands on frames other than HEADERS/CONTINUATION as they stream, and
// holds a header block only up to the limit the server announced (issue 33:
// trickled 16 MiB frames were buffered whole and re-parsed on every chunk).

import assert from 'node:assert/strict';
import { constants as h2 } from 'node:http2';
import { test } from 'node:test';
import { AuthorityRewriter } from '../../pkg/grpc/authority-filter.js';
import { encodeHeaderBlock, HpackDecoder } from '../../pkg/grpc/hpack/hpack.js';
import { HpackError, Http2FrameError } from '../../pkg/grpc/errors.js';
import { H2_PREFACE, h2Frame } from '../support/http2-frames.js';

const DATA = 0x0;
const HEADERS = 0x1;
const CONTINUATION = 0x9;
const END_HEADERS = 0x4;
const LARGEST_FRAME = 2 ** 24 - 1;

/** A 9-byte frame header declaring `length` bytes of payload that do not follow. */
function frameHead(type: number, flags: number, streamId: number, length: number): Buffer {
  const head = h2Frame(type, flags, streamId, Buffer.alloc(0));
  head.writeUIntBE(length, 0, 3);
  return head;
}

function started(limits?: ConstructorParameters<typeof AuthorityRewriter>[0]): AuthorityRewriter {
  const r = new AuthorityRewriter(limits);
  assert.deepEqual(Buffer.concat(r.push(H2_PREFACE)), H2_PREFACE);
  return r;
}

function cpuMs(since: NodeJS.CpuUsage): number {
  const d = process.cpuUsage(since);
  return (d.user + d.system) / 1000;
}

test('a frame declaring more than the announced SETTINGS_MAX_FRAME_SIZE is refused at its 9-byte header with FRAME_SIZE_ERROR', () => {
  for (const [type, name] of [
    [DATA, 'DATA'],
    [HEADERS, 'HEADERS'],
  ] as const) {
    const r = started();
    assert.throws(
      () => r.push(frameHead(type, 0, 1, LARGEST_FRAME)),
      (err: unknown) => {
        assert.ok(err instanceof Http2FrameError, `${name}: ${String(err)}`);
        assert.equal(err.code, 'YT_ERR_HTTP2_FRAME');
        assert.equal(err.http2Code, h2.NGHTTP2_FRAME_SIZE_ERROR);
        assert.equal(err.message, `a frame of type ${type} on stream 1 declares ${LARGEST_FRAME} bytes, more than the SETTINGS_MAX_FRAME_SIZE of 16384`);
        return true;
      },
    );
    assert.equal(r.bufferedBytes, 0, 'nothing held after the refusal');
    assert.deepEqual(r.push(Buffer.alloc(1024)), [], 'later bytes are dropped');
  }
  // Exactly the announced size passes, and so does a larger one the server announced.
  const max = Buffer.alloc(16_384, 7);
  assert.deepEqual(Buffer.concat(started().push(h2Frame(DATA, 0, 1, max))), h2Frame(DATA, 0, 1, max));
  assert.doesNotThrow(() => started({ maxFrameSize: 65_536 }).push(frameHead(DATA, 0, 1, 65_536)));
  assert.throws(() => new AuthorityRewriter({ maxFrameSize: 1024 }), TypeError);
});

test('a 16 MiB DATA frame trickled in 16 KiB pieces streams through as it arrives: nothing held, CPU linear', () => {
  // A server that announced the largest frame HTTP/2 allows: the filter must still not wait for the payload.
  const r = started({ maxFrameSize: LARGEST_FRAME });
  const head = frameHead(DATA, 0, 1, LARGEST_FRAME);
  assert.deepEqual(Buffer.concat(r.push(head)), head, 'the header goes on at once');
  const piece = Buffer.alloc(16 * 1024, 0x61);
  const start = process.cpuUsage();
  let sent = 0;
  let maxHeld = 0;
  while (sent < LARGEST_FRAME) {
    const p = piece.subarray(0, Math.min(piece.length, LARGEST_FRAME - sent));
    const out = r.push(p);
    assert.equal(out.length, 1, `bytes ${sent}..: handed on in the same call`);
    assert.equal(out[0]!.buffer, p.buffer, 'as a view of the input, not a copy');
    assert.equal(out[0]!.length, p.length);
    maxHeld = Math.max(maxHeld, r.bufferedBytes);
    sent += p.length;
  }
  // The old filter concatenated and re-scanned all it held on every piece: over 8 GiB of copying here.
  const used = cpuMs(start);
  assert.ok(used < 2000, `1024 pieces took ${used.toFixed(0)} ms of CPU`);
  assert.equal(maxHeld, 0);
  // The next frame is parsed where the payload ended, its header cut in two.
  const next = h2Frame(DATA, 0x1, 1, Buffer.from('end'));
  assert.deepEqual(Buffer.concat([...r.push(next.subarray(0, 4)), ...r.push(next.subarray(4))]), next);
});

test('a header block trickled a KiB at a time is held only up to SETTINGS_MAX_HEADER_LIST_SIZE, then refused with COMPRESSION_ERROR', () => {
  const r = started();
  const input = Buffer.concat([
    h2Frame(HEADERS, 0, 1, Buffer.alloc(16_384, 0x82)),
    ...Array.from({ length: 8 }, () => h2Frame(CONTINUATION, 0, 1, Buffer.alloc(16_384, 0x82))),
  ]);
  let maxHeld = 0;
  let refused: unknown;
  let fed = 0;
  for (; fed < input.length && refused === undefined; fed += 1024) {
    try {
      assert.deepEqual(r.push(input.subarray(fed, fed + 1024)), [], 'nothing of an unfinished block goes on');
    } catch (err: unknown) {
      refused = err;
    }
    maxHeld = Math.max(maxHeld, r.bufferedBytes);
  }
  assert.ok(refused instanceof Http2FrameError, String(refused));
  assert.equal(refused.http2Code, h2.NGHTTP2_COMPRESSION_ERROR);
  assert.equal(refused.message, 'the header block of stream 1 is larger than the SETTINGS_MAX_HEADER_LIST_SIZE of 65535 bytes');
  // Refused at the header of the frame that would pass the cap (the fourth), with three payloads held.
  assert.equal(fed, Math.ceil((3 * (9 + 16_384) + 9) / 1024) * 1024);
  assert.ok(maxHeld <= 3 * 16_384 + 9, `held at most ${maxHeld} bytes`);
  assert.equal(r.bufferedBytes, 0, 'released');
});

test('a small header block naming a large table entry many times is refused before it expands', () => {
  const r = started();
  // One 4000-byte entry into the dynamic table (index 62), then 2000 one-byte references to it: 8 MB decoded.
  // Literal with incremental indexing, new name "x", a value of 127 + 0x21 + (0x1e << 7) = 4000 bytes.
  const insert = Buffer.concat([Buffer.from([0x40, 0x01, 0x78, 0x7f, 0xa1, 0x1e]), Buffer.alloc(4000, 0x79)]);
  assert.equal(new HpackDecoder().decode(insert)[0]!.value.length, 4000);
  const block = Buffer.concat([insert, Buffer.alloc(2000, 0xbe)]);
  assert.ok(block.length < 16_384);
  assert.throws(
    () => r.push(h2Frame(HEADERS, END_HEADERS, 1, block)),
    (err: unknown) => err instanceof HpackError && err.message === 'header list larger than 65535 bytes once decoded',
  );
});

test('output is the same however the input is cut; HEADERS are rewritten, every other frame passes byte for byte', () => {
  const block = encodeHeaderBlock([
    { name: ':method', value: 'POST' },
    { name: ':scheme', value: 'http' },
    { name: ':path', value: '/ProxyService/Proxy' },
    { name: ':authority', value: '/tmp/x/egress.sock' },
    { name: 'content-type', value: 'application/grpc' },
  ]);
  const data = Buffer.alloc(40_000);
  for (let i = 0; i < data.length; i++) data[i] = i % 251;
  const others = [
    h2Frame(0x4, 0, 0, Buffer.alloc(0)), // SETTINGS
    h2Frame(0x8, 0, 0, Buffer.from([0, 0, 0x10, 0])), // WINDOW_UPDATE
    h2Frame(DATA, 0, 1, data.subarray(0, 16_384)),
    h2Frame(DATA, 0, 1, Buffer.alloc(0)),
    h2Frame(0x6, 0, 0, Buffer.alloc(8, 1)), // PING
    h2Frame(DATA, 0x1, 1, data.subarray(16_384, 32_768)),
  ];
  const input = Buffer.concat([
    H2_PREFACE,
    others[0]!,
    others[1]!,
    h2Frame(HEADERS, 0, 1, block.subarray(0, 7)),
    h2Frame(CONTINUATION, 0, 1, Buffer.alloc(0)),
    h2Frame(CONTINUATION, END_HEADERS, 1, block.subarray(7)),
    ...others.slice(2),
    h2Frame(HEADERS, END_HEADERS | 0x1, 3, encodeHeaderBlock([{ name: ':authority', value: 'localhost:1' }])),
  ]);
  const whole = Buffer.concat(new AuthorityRewriter().push(input));
  // Walk the output: preface, SETTINGS, WINDOW_UPDATE, one rewritten HEADERS, the rest unchanged, the last HEADERS.
  let pos = H2_PREFACE.length + others[0]!.length + others[1]!.length;
  assert.deepEqual(whole.subarray(0, pos), Buffer.concat([H2_PREFACE, others[0]!, others[1]!]));
  const len = whole.readUIntBE(pos, 3);
  assert.equal(whole[pos + 3], HEADERS);
  assert.equal(whole[pos + 4], END_HEADERS);
  const fields = new HpackDecoder().decode(whole.subarray(pos + 9, pos + 9 + len));
  assert.equal(fields.find((f) => f.name === ':authority')?.value, 'localhost');
  assert.equal(fields.find((f) => f.name === ':path')?.value, '/ProxyService/Proxy');
  pos += 9 + len;
  const rest = Buffer.concat(others.slice(2));
  assert.deepEqual(whole.subarray(pos, pos + rest.length), rest);
  pos += rest.length;
  assert.equal(whole[pos + 4], END_HEADERS | 0x1, 'END_STREAM kept');
  assert.equal(new HpackDecoder().decode(whole.subarray(pos + 9))[0]!.value, 'localhost:1');

  // Cut at every length from 1 to 40 bytes, and at pseudo-random places.
  let seed = 7;
  const random = (n: number): number => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
  for (let round = 0; round < 80; round++) {
    const r = new AuthorityRewriter();
    const out: Buffer[] = [];
    for (let at = 0; at < input.length;) {
      const n = round < 40 ? round + 1 : 1 + random(20_000);
      out.push(...r.push(input.subarray(at, at + n)));
      at += n;
    }
    assert.deepEqual(Buffer.concat(out), whole, `round ${round}`);
  }
});

test('bytes that are not HTTP/2 pass unchanged, the matched part of a cut preface included', () => {
  const garbage = new AuthorityRewriter();
  assert.deepEqual(Buffer.concat(garbage.push(Buffer.from('GET / HTTP/1.1\r\n\r\n'))).toString(), 'GET / HTTP/1.1\r\n\r\n');
  const cut = new AuthorityRewriter();
  assert.deepEqual(cut.push(Buffer.from('PRI * HT')), []);
  assert.equal(Buffer.concat(cut.push(Buffer.from('XX more'))).toString(), 'PRI * HTXX more');
});
