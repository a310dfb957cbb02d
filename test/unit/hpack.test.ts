import assert from 'node:assert/strict';
import { test } from 'node:test';
import { randomBytes } from 'node:crypto';
import { encodeHeaderBlock, HpackDecoder } from '../../pkg/grpc/hpack/hpack.js';
import { huffmanDecode, huffmanEncode } from '../../pkg/grpc/hpack/huffman.js';
import { AuthorityRewriter } from '../../pkg/grpc/authority-filter.js';
import { HpackError, Http2FrameError, HuffmanError } from '../../pkg/grpc/errors.js';
import { H2_PREFACE, h2Frame } from '../support/http2-frames.js';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');
const pairs = (fields: { name: string; value: string }[]): string[][] => fields.map((f) => [f.name, f.value]);

test('Huffman: RFC 7541 C.4 strings decode and encode to the published bytes', () => {
  for (const [text, coded] of [
    ['www.example.com', 'f1e3 c2e5 f23a 6ba0 ab90 f4ff'],
    ['no-cache', 'a8eb 1064 9cbf'],
    ['custom-key', '25a8 49e9 5ba9 7d7f'],
    ['custom-value', '25a8 49e9 5bb8 e8b4 bf'],
  ] as const) {
    assert.equal(huffmanDecode(hex(coded)).toString('latin1'), text);
    assert.deepEqual(huffmanEncode(Buffer.from(text, 'latin1')), hex(coded));
  }
});

test('Huffman: every byte value round-trips; EOS, long padding and non-one padding are refused', () => {
  const all = Buffer.from([...Array(256).keys()]);
  assert.deepEqual(huffmanDecode(huffmanEncode(all)), all);
  for (let i = 0; i < 50; i++) {
    const b = randomBytes(1 + ((i * 7) % 300));
    assert.deepEqual(huffmanDecode(huffmanEncode(b)), b);
  }
  assert.throws(() => huffmanDecode(hex('ffff ffff')), HuffmanError); // 30 ones = EOS
  assert.throws(() => huffmanDecode(hex('1fff')), HuffmanError); // 'a' then 11 bits of padding
  assert.throws(() => huffmanDecode(hex('18')), HuffmanError); // 'a' then padding 000
});

test('HPACK decoder: RFC 7541 C.4 requests in sequence, sharing the dynamic table', () => {
  const d = new HpackDecoder();
  assert.deepEqual(pairs(d.decode(hex('8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff'))), [
    [':method', 'GET'],
    [':scheme', 'http'],
    [':path', '/'],
    [':authority', 'www.example.com'],
  ]);
  assert.deepEqual(pairs(d.decode(hex('8286 84be 5886 a8eb 1064 9cbf'))), [
    [':method', 'GET'],
    [':scheme', 'http'],
    [':path', '/'],
    [':authority', 'www.example.com'],
    ['cache-control', 'no-cache'],
  ]);
  assert.deepEqual(pairs(d.decode(hex('8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf'))), [
    [':method', 'GET'],
    [':scheme', 'https'],
    [':path', '/index.html'],
    [':authority', 'www.example.com'],
    ['custom-key', 'custom-value'],
  ]);
});

test('HPACK decoder: eviction under a small table, size updates, and malformed blocks', () => {
  const d = new HpackDecoder(100);
  d.decode(hex('3f45')); // size update to 100 (5-bit prefix 31 + 69)
  d.decode(Buffer.concat([hex('40'), hex('01 61'), hex('01 62')])); // a: b (34 bytes)
  d.decode(Buffer.concat([hex('40'), hex('01 63'), hex('01 64')])); // c: d
  d.decode(Buffer.concat([hex('40'), hex('01 65'), hex('01 66')])); // e: f evicts a: b
  assert.deepEqual(pairs(d.decode(hex('be bf'))), [
    ['e', 'f'],
    ['c', 'd'],
  ]);
  assert.throws(() => d.decode(hex('c0')), /past the end of the dynamic table/);
  assert.throws(() => d.decode(hex('3f 80 80 80 80 10')), HpackError); // integer too large
  assert.throws(() => new HpackDecoder().decode(hex('3fe2 1f')), /exceeds the allowed 4096/);
  assert.throws(() => new HpackDecoder().decode(hex('82 20')), /after a header field/);
  assert.throws(() => new HpackDecoder().decode(hex('80')), /index 0/);
  assert.throws(() => new HpackDecoder().decode(hex('04 05 61')), /runs past/);
});

test('HPACK encoder: literals without indexing that a fresh decoder reads back, sensitive fields kept never-indexed', () => {
  const fields = [
    { name: ':method', value: 'POST' },
    { name: ':authority', value: 'localhost' },
    { name: 'x-custom', value: 'ünïcode bytes \x01' },
    { name: 'authorization', value: 'secret', sensitive: true },
  ];
  const block = encodeHeaderBlock(fields.map((f) => ({ ...f, value: Buffer.from(f.value).toString('latin1') })));
  const d = new HpackDecoder();
  const out = d.decode(block);
  assert.deepEqual(
    out.map((f) => [f.name, Buffer.from(f.value, 'latin1').toString()]),
    fields.map((f) => [f.name, f.value]),
  );
  assert.equal(out[3]!.sensitive, true);
  // Nothing entered the table: index 62 does not exist.
  assert.throws(() => d.decode(hex('be')), /past the end/);
});

test('the authority filter rewrites a socket-path :authority in HEADERS+CONTINUATION, keeps valid ones and every other frame', () => {
  const preface = H2_PREFACE;
  const frame = h2Frame;
  const block = encodeHeaderBlock([
    { name: ':method', value: 'POST' },
    { name: ':scheme', value: 'http' },
    { name: ':path', value: '/ProxyService/Proxy' },
    { name: ':authority', value: '/tmp/x/egress.sock' },
    { name: 'content-type', value: 'application/grpc' },
  ]);
  const settings = frame(0x4, 0, 0, Buffer.alloc(0));
  // Split the block over HEADERS (padded, with priority) and a CONTINUATION, and feed it a byte at a time.
  const first = Buffer.concat([Buffer.from([3]), Buffer.alloc(5), block.subarray(0, 10), Buffer.alloc(3)]);
  const input = Buffer.concat([
    preface,
    settings,
    frame(0x1, 0x8 | 0x20, 1, first),
    frame(0x9, 0x4, 1, block.subarray(10)),
    frame(0x0, 0x1, 1, Buffer.from('x')),
  ]);
  const r = new AuthorityRewriter();
  const out: Buffer[] = [];
  for (const byte of input) out.push(...r.push(Buffer.from([byte])));
  const bytes = Buffer.concat(out);
  assert.deepEqual(bytes.subarray(0, 24 + 9), Buffer.concat([preface, settings]));
  const headers = bytes.subarray(33);
  assert.equal(headers[3], 0x1);
  assert.equal(headers[4], 0x4, 'END_HEADERS, no padding, no priority');
  const len = headers.readUIntBE(0, 3);
  const fields = new HpackDecoder().decode(headers.subarray(9, 9 + len));
  assert.deepEqual(fields.find((f) => f.name === ':authority')?.value, 'localhost');
  assert.equal(r.rewritten, 1);
  assert.deepEqual(headers.subarray(9 + len), frame(0x0, 0x1, 1, Buffer.from('x')), 'DATA passes unchanged');

  const valid = new AuthorityRewriter();
  valid.push(preface);
  const kept = Buffer.concat(valid.push(frame(0x1, 0x4 | 0x1, 3, encodeHeaderBlock([{ name: ':authority', value: 'localhost:8080' }]))));
  assert.equal(new HpackDecoder().decode(kept.subarray(9))[0]!.value, 'localhost:8080');
  assert.equal(kept[4], 0x5, 'END_STREAM kept');
  assert.equal(valid.rewritten, 0);
});

test('the authority filter refuses interleaved, orphaned, oversized and undecodable header blocks', () => {
  const preface = H2_PREFACE;
  const frame = h2Frame;
  const fresh = (): AuthorityRewriter => {
    const r = new AuthorityRewriter();
    r.push(preface);
    return r;
  };
  assert.throws(() => fresh().push(Buffer.concat([frame(0x1, 0, 1, Buffer.from([0x82])), frame(0x0, 0, 1, Buffer.alloc(1))])), Http2FrameError);
  assert.throws(() => fresh().push(frame(0x9, 0x4, 1, Buffer.from([0x82]))), Http2FrameError);
  assert.throws(() => fresh().push(frame(0x1, 0x4, 1, Buffer.from([0xff, 0xff, 0xff, 0xff, 0x7f]))), HpackError);
  assert.throws(() => fresh().push(frame(0x1, 0x8 | 0x4, 1, Buffer.from([200]))), Http2FrameError);
  const big = fresh();
  big.push(frame(0x1, 0, 1, Buffer.alloc(16_000)));
  assert.throws(() => {
    for (let i = 0; i < 5; i++) big.push(frame(0x9, 0, 1, Buffer.alloc(16_000)));
  }, /larger than/);
  // Not HTTP/2 at all: passed on for the server to refuse.
  const garbage = new AuthorityRewriter();
  assert.deepEqual(Buffer.concat(garbage.push(Buffer.from('GET / HTTP/1.1\r\n\r\n'))).toString(), 'GET / HTTP/1.1\r\n\r\n');
});
