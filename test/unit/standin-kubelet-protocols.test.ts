// The stand-in's codecs on their own, fed bytes split at awkward places:
// SPDY/3 frames and header compression, RFC 6455 frames, chunked bodies,
// the /bytes pattern, and the kubelet's query parsing.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { constants, inflateSync } from 'node:zlib';
import { PatternVerifier, patternByte, patternBytes } from '../support/standin-kubelet/bytes.js';
import { PatternMismatchError, SpdyProtocolError, WebSocketProtocolError } from '../support/standin-kubelet/errors.js';
import { lineNumberer, parseStreamOptions, planExec } from '../support/standin-kubelet/exec.js';
import { parseLogQuery } from '../support/standin-kubelet/logs.js';
import { ChunkedDecoder } from '../support/standin-kubelet/raw-http.js';
import {
  SpdyFrameParser,
  encodeDataHeader,
  encodeGoAway,
  encodePing,
  encodeRstStream,
  encodeSynReply,
  type SpdyFrame,
} from '../support/standin-kubelet/spdy-frames.js';
import { HeaderCompressor, HeaderDecompressor, SPDY3_DICTIONARY, adler32, serializeHeaderBlock } from '../support/standin-kubelet/spdy-headers.js';
import { FrameParser, OPCODE, maskedFrame, frameHeader, webSocketAccept } from '../support/standin-kubelet/websocket-frames.js';

/** Every test is bounded in time. */
const LIMIT = { timeout: 30_000 };

// kubectl v1.32's first bytes after a SPDY port-forward upgrade (two SYN_STREAMs, Go's zlib), from the kube-apiserver fixtures.
const KUBECTL_SYN_STREAMS = Buffer.from(
  '800300010000003d0000000100000000000078f9e3c6a7c202253a703a2b294a4dcc851625aca9a0808614cb45a024cc6461c0c0c0c0590489c44c50e2663400000000ffff' +
    '800300010000001300000003000000000000225fab21000000ffff',
  'hex',
);

function parseAllSplits(bytes: Buffer): SpdyFrame[][] {
  const results: SpdyFrame[][] = [];
  for (let cut = 0; cut <= bytes.length; cut++) {
    const p = new SpdyFrameParser(1024 * 1024);
    results.push([...p.push(bytes.subarray(0, cut)), ...p.push(bytes.subarray(cut))]);
  }
  return results;
}

test('the SPDY/3 dictionary is the 1423 bytes whose Adler-32 Go announces (0xe3c6a7c2)', LIMIT, () => {
  assert.equal(SPDY3_DICTIONARY.length, 1423);
  assert.equal(adler32(SPDY3_DICTIONARY), 0xe3c6a7c2);
  assert.equal(KUBECTL_SYN_STREAMS.readUInt32BE(20), 0xe3c6a7c2);
});

test("kubectl's SYN_STREAMs parse the same at every split point and inflate to the port-forward headers", LIMIT, async () => {
  for (const frames of parseAllSplits(KUBECTL_SYN_STREAMS)) {
    assert.deepEqual(
      frames.map((f) => [f.type, 'streamId' in f ? f.streamId : -1]),
      [
        ['SYN_STREAM', 1],
        ['SYN_STREAM', 3],
      ],
    );
  }
  const [a, b] = new SpdyFrameParser(1024).push(KUBECTL_SYN_STREAMS);
  assert.ok(a?.type === 'SYN_STREAM' && b?.type === 'SYN_STREAM');
  const inflater = new HeaderDecompressor();
  try {
    assert.deepEqual(await inflater.decompress(a.headerBlock), { streamtype: 'error', port: '80', requestid: '0' });
    assert.deepEqual(await inflater.decompress(b.headerBlock), { streamtype: 'error', port: '80', requestid: '1' });
  } finally {
    inflater.destroy();
  }
});

test('our header blocks are one zlib stream with the dictionary that any inflater reads', LIMIT, async () => {
  const c = new HeaderCompressor();
  const first = c.compress({ streamtype: 'data', port: '8080', requestid: '7' });
  const second = c.compress({});
  assert.deepEqual(first.subarray(0, 6), Buffer.from('78f9e3c6a7c2', 'hex'));
  const plain = inflateSync(Buffer.concat([first, second]), { dictionary: SPDY3_DICTIONARY, finishFlush: constants.Z_SYNC_FLUSH });
  assert.deepEqual(plain, Buffer.concat([serializeHeaderBlock({ streamtype: 'data', port: '8080', requestid: '7' }), serializeHeaderBlock({})]));
  const d = new HeaderDecompressor(256 * 1024);
  try {
    assert.deepEqual(await d.decompress(first), { streamtype: 'data', port: '8080', requestid: '7' });
    assert.deepEqual(await d.decompress(second), {});
    const big = 'x'.repeat(70_000); // over one stored block
    assert.deepEqual(await d.decompress(c.compress({ big })), { big });
  } finally {
    d.destroy();
  }
});

test('a broken or oversized header block is a protocol error', LIMIT, async () => {
  const d = new HeaderDecompressor(100);
  try {
    await assert.rejects(d.decompress(new HeaderCompressor().compress({ a: 'y'.repeat(200) })), SpdyProtocolError);
  } finally {
    d.destroy();
  }
  const e = new HeaderDecompressor();
  try {
    await assert.rejects(e.decompress(Buffer.from('not zlib at all')), SpdyProtocolError);
  } finally {
    e.destroy();
  }
});

test('SPDY control and data frames round-trip through the parser at every split point', LIMIT, () => {
  const data = Buffer.from('hello, pod');
  const bytes = Buffer.concat([
    encodeSynReply(1, Buffer.from([1, 2, 3])),
    encodeDataHeader(1, data.length, false),
    data,
    encodeDataHeader(1, 0, true),
    encodeRstStream(3, 5),
    encodePing(2),
    encodeGoAway(3, 0),
  ]);
  const expected: SpdyFrame[] = [
    { type: 'SYN_REPLY', streamId: 1, fin: false, headerBlock: Buffer.from([1, 2, 3]) },
    { type: 'DATA', streamId: 1, fin: false, data },
    { type: 'DATA', streamId: 1, fin: true, data: Buffer.alloc(0) },
    { type: 'RST_STREAM', streamId: 3, status: 5 },
    { type: 'PING', id: 2 },
    { type: 'GOAWAY', lastGoodStreamId: 3, status: 0 },
  ];
  for (const frames of parseAllSplits(bytes)) assert.deepEqual(frames, expected);
  assert.throws(() => new SpdyFrameParser(16).push(encodeDataHeader(1, 17, false)), SpdyProtocolError);
  assert.throws(() => new SpdyFrameParser(16).push(Buffer.from('8002000600000004000000 01'.replace(' ', ''), 'hex')), /version 2/);
});

test('WebSocket frames: fragmented masked messages and control frames come out the same when fed a byte at a time', LIMIT, () => {
  const payload = patternBytes(0, 70_000); // 64-bit length form for the whole, 16-bit for parts
  const bytes = Buffer.concat([
    maskedFrame(OPCODE.binary, payload.subarray(0, 100), false),
    maskedFrame(OPCODE.ping, Buffer.from('ping!')),
    maskedFrame(OPCODE.continuation, payload.subarray(100, 69_000), false),
    maskedFrame(OPCODE.continuation, payload.subarray(69_000), true),
    maskedFrame(OPCODE.binary, Buffer.alloc(0)),
    maskedFrame(OPCODE.close, Buffer.from([0x03, 0xe8])),
  ]);
  for (const step of [1, 7, 4096, bytes.length]) {
    const messages: Buffer[] = [];
    const controls: Array<[number, string]> = [];
    let current: Buffer[] = [];
    const parser = new FrameParser(true, {
      onData: (_op, piece, first, last) => {
        if (first) current = [];
        current.push(Buffer.from(piece));
        if (last) messages.push(Buffer.concat(current));
      },
      onControl: (op, p) => controls.push([op, p.toString('hex')]),
    });
    for (let i = 0; i < bytes.length; i += step) parser.write(Buffer.from(bytes.subarray(i, i + step)));
    assert.equal(messages.length, 2);
    assert.ok(messages[0]!.equals(payload));
    assert.equal(messages[1]!.length, 0);
    assert.deepEqual(controls, [
      [OPCODE.ping, Buffer.from('ping!').toString('hex')],
      [OPCODE.close, '03e8'],
    ]);
  }
});

test('WebSocket protocol violations carry the close code to send', LIMIT, () => {
  const server = (): FrameParser => new FrameParser(true, { onData: () => undefined, onControl: () => undefined });
  const code = (fn: () => void): number => {
    try {
      fn();
    } catch (err: unknown) {
      assert.ok(err instanceof WebSocketProtocolError);
      return err.closeCode;
    }
    return 0;
  };
  assert.equal(
    code(() => server().write(Buffer.concat([frameHeader(OPCODE.binary, 1), Buffer.from([0])]))),
    1002,
  ); // unmasked
  assert.equal(
    code(() => server().write(maskedFrame(OPCODE.ping, Buffer.alloc(0), false))),
    1002,
  ); // fragmented control
  assert.equal(
    code(() => server().write(maskedFrame(OPCODE.continuation, Buffer.from('x')))),
    1002,
  );
  assert.equal(
    code(() => server().write(Buffer.from([0xc2, 0x80, 0, 0, 0, 0]))),
    1002,
  ); // RSV1
  assert.equal(
    code(() => server().write(Buffer.from([0x83, 0x80, 0, 0, 0, 0]))),
    1002,
  ); // reserved opcode
  assert.equal(
    code(() => server().write(Buffer.from([0x82, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]))),
    1009,
  );
  // RFC 6455's example, and a key kubectl sent in the fixtures.
  assert.equal(webSocketAccept('dGhlIHNhbXBsZSBub25jZQ=='), 's3pPLMBiTxaQ9kYGzzhZRbK+xOo=');
  assert.equal(webSocketAccept('RzLvLKTYpqCvBHe+nYv2tQ=='), 'KxcEo+ad9DXBnzeDjl3GtXEm6bM=');
});

test('the /bytes pattern is ((i mod 256) * 31 + 7) & 0xff at any offset, and a wrong byte is named', LIMIT, () => {
  assert.deepEqual([0, 1, 255, 256, 2 ** 33 + 1].map(patternByte), [7, 38, (255 * 31 + 7) & 0xff, 7, 38]);
  const v = new PatternVerifier();
  const data = patternBytes(0, 300_000);
  v.update(data.subarray(0, 12345));
  v.update(data.subarray(12345));
  assert.equal(v.received, 300_000);
  const bad = patternBytes(300_000, 1000);
  bad[777] = bad[777]! ^ 1;
  assert.throws(
    () => v.update(bad),
    (err: unknown) => err instanceof PatternMismatchError && err.index === 300_777,
  );
});

test('chunked bodies decode the same at every split point', LIMIT, () => {
  const body = Buffer.from('7\r\nline 1\n\r\n9\r\nfollow 1\n\r\n0\r\n\r\n');
  for (let cut = 0; cut <= body.length; cut++) {
    const d = new ChunkedDecoder();
    const out = Buffer.concat([...d.push(body.subarray(0, cut)), ...d.push(body.subarray(cut))]).toString();
    assert.equal(out, 'line 1\nfollow 1\n');
    assert.ok(d.done);
  }
});

test('query parsing follows the kubelet: flags are "1", log options Go-parsed and validated', LIMIT, () => {
  assert.deepEqual(parseStreamOptions(new URLSearchParams('command=echo&command=hi&error=1&output=1'), 'exec'), {
    command: ['echo', 'hi'],
    stdin: false,
    stdout: true,
    stderr: true,
    tty: false,
  });
  assert.equal(parseStreamOptions(new URLSearchParams('command=sh&input=1&output=1&tty=1&error=1'), 'exec') instanceof Object, true);
  assert.equal((parseStreamOptions(new URLSearchParams('command=sh&input=1&tty=1&error=1'), 'exec') as { stderr: boolean }).stderr, false);
  assert.match(parseStreamOptions(new URLSearchParams('command=ls&output=true'), 'exec') as string, /at least 1 of stdin/);
  assert.match(parseStreamOptions(new URLSearchParams('output=1'), 'exec') as string, /command/);
  assert.equal(planExec({ command: ['echo', 'a', 'b'], stdin: true, stdout: true, stderr: false, tty: false }).output.toString(), 'a b\n');
  assert.equal(planExec({ command: ['false'], stdin: false, stdout: true, stderr: false, tty: false }).exitCode, 1);

  assert.equal(
    planExec({ command: ['cat'], stdin: true, stdout: true, stderr: false, tty: false })
      .transform(Buffer.from('as is'))
      .toString(),
    'as is',
  );

  assert.deepEqual(parseLogQuery(new URLSearchParams('follow=T&tailLines=2&timestamps=1&limitBytes=5&sinceSeconds=10')), {
    follow: true,
    timestamps: true,
    tailLines: 2,
    sinceSeconds: 10,
    limitBytes: 5,
  });
  assert.equal((parseLogQuery(new URLSearchParams('tailLines=two')) as { status: number }).status, 400);
  assert.equal((parseLogQuery(new URLSearchParams('sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z')) as { status: number }).status, 422);
});

test('nl numbers whole stdin lines with its session, the same at every split point, and keeps a partial line for its end', LIMIT, () => {
  const input = Buffer.from('one\n\nthree and more\nfour');
  for (let cut = 0; cut <= input.length; cut++) {
    const nl = lineNumberer('s1');
    const out = Buffer.concat([nl(input.subarray(0, cut)), nl(input.subarray(cut))]).toString();
    assert.equal(out, 's1 1 one\ns1 2 \ns1 3 three and more\n', `cut at ${cut}`);
    assert.equal(nl(Buffer.from('\n')).toString(), 's1 4 four\n');
  }
  const opts = { command: ['nl'], stdin: true, stdout: true, stderr: false, tty: false };
  const [a, b] = [planExec(opts), planExec(opts)];
  assert.equal(a.echoStdin, true);
  assert.notEqual(
    a.transform(Buffer.from('x\n')).toString().split(' ')[0],
    b.transform(Buffer.from('x\n')).toString().split(' ')[0],
    'each exec has its own session',
  );
});
