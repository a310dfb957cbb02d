// Raw HTTP/2 bytes for tests that must send what a real client library would
// refuse to: the connection preface and hand-built frames.

export const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

export const H2_TYPE = { DATA: 0x0, HEADERS: 0x1, SETTINGS: 0x4, CONTINUATION: 0x9 } as const;
export const H2_FLAG = { END_STREAM: 0x1, END_HEADERS: 0x4, PADDED: 0x8, PRIORITY: 0x20 } as const;

export function h2Frame(type: number, flags: number, streamId: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(streamId, 5);
  return Buffer.concat([head, payload]);
}
