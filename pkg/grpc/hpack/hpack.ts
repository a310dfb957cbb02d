// HPACK (RFC 7541): a stateful decoder of header blocks, and an encoder that
// writes every field as a literal without indexing, so that the peer's
// decoder table never changes. Names and values are byte strings, kept as
// latin1 JS strings so that every byte survives a round trip.

import { HpackError, HuffmanError } from '../errors.js';
import { huffmanDecode, huffmanEncode } from './huffman.js';
import { STATIC_TABLE } from './static-table.js';

export interface HeaderField {
  name: string;
  value: string;
  /** Sent as "never indexed" (a sensitive value); re-encoded the same way. */
  sensitive?: boolean;
}

/** The size HTTP/2 peers start with (SETTINGS_HEADER_TABLE_SIZE default). */
export const DEFAULT_TABLE_SIZE = 4096;
const ENTRY_OVERHEAD = 32;
/** Larger integers are refused (no real header needs them; they only serve to overflow). */
const MAX_INTEGER = 2 ** 28;

function decodeInteger(buf: Buffer, pos: number, prefixBits: number): { value: number; pos: number } {
  if (pos >= buf.length) throw new HpackError('header block ends inside an integer');
  const max = (1 << prefixBits) - 1;
  let value = buf[pos]! & max;
  pos++;
  if (value < max) return { value, pos };
  let shift = 0;
  for (;;) {
    if (pos >= buf.length) throw new HpackError('header block ends inside an integer');
    const b = buf[pos++]!;
    value += (b & 0x7f) * 2 ** shift;
    if (value > MAX_INTEGER) throw new HpackError('integer too large');
    if ((b & 0x80) === 0) return { value, pos };
    shift += 7;
  }
}

function encodeInteger(out: number[], value: number, prefixBits: number, flags: number): void {
  const max = (1 << prefixBits) - 1;
  if (value < max) {
    out.push(flags | value);
    return;
  }
  out.push(flags | max);
  value -= max;
  while (value >= 0x80) {
    out.push((value % 0x80) | 0x80);
    value = Math.floor(value / 0x80);
  }
  out.push(value);
}

function decodeString(buf: Buffer, pos: number): { value: string; pos: number } {
  if (pos >= buf.length) throw new HpackError('header block ends before a string');
  const huffman = (buf[pos]! & 0x80) !== 0;
  const { value: length, pos: start } = decodeInteger(buf, pos, 7);
  const end = start + length;
  if (end > buf.length) throw new HpackError('string literal runs past the header block');
  const raw = buf.subarray(start, end);
  let bytes: Buffer;
  try {
    bytes = huffman ? huffmanDecode(raw) : raw;
  } catch (err: unknown) {
    if (err instanceof HuffmanError) throw new HpackError(err.message, { cause: err });
    throw err;
  }
  return { value: bytes.toString('latin1'), pos: end };
}

function encodeString(out: number[], value: string): void {
  const raw = Buffer.from(value, 'latin1');
  const coded = huffmanEncode(raw);
  // Huffman when it is shorter, as encoders usually do.
  if (coded.length < raw.length) {
    encodeInteger(out, coded.length, 7, 0x80);
    for (const b of coded) out.push(b);
  } else {
    encodeInteger(out, raw.length, 7, 0x00);
    for (const b of raw) out.push(b);
  }
}

export class HpackDecoder {
  /** Newest first; index 62 is dynamic[0]. */
  private readonly dynamic: HeaderField[] = [];
  private size = 0;
  private capacity: number;

  /** @param maxTableSize what our side allowed (SETTINGS_HEADER_TABLE_SIZE); the peer may not exceed it. */
  constructor(private readonly maxTableSize = DEFAULT_TABLE_SIZE) {
    this.capacity = maxTableSize;
  }

  /**
   * @param maxListSize the most the decoded list may hold (RFC 9113 SETTINGS_MAX_HEADER_LIST_SIZE: names, values and
   * 32 bytes per field); a larger one is refused as it grows, since a few bytes of indexed references can name kilobytes.
   */
  decode(block: Buffer, maxListSize = Infinity): HeaderField[] {
    const fields: HeaderField[] = [];
    let pos = 0;
    let listSize = 0;
    const add = (field: HeaderField): void => {
      listSize += field.name.length + field.value.length + ENTRY_OVERHEAD;
      if (listSize > maxListSize) throw new HpackError(`header list larger than ${maxListSize} bytes once decoded`);
      fields.push(field);
    };
    while (pos < block.length) {
      const b = block[pos]!;
      if ((b & 0x80) !== 0) {
        const r = decodeInteger(block, pos, 7);
        pos = r.pos;
        const entry = this.entry(r.value);
        add({ name: entry.name, value: entry.value });
      } else if ((b & 0xc0) === 0x40) {
        const r = this.literal(block, pos, 6);
        pos = r.pos;
        add({ name: r.name, value: r.value });
        this.insert({ name: r.name, value: r.value });
      } else if ((b & 0xe0) === 0x20) {
        if (fields.length > 0) throw new HpackError('dynamic table size update after a header field');
        const r = decodeInteger(block, pos, 5);
        pos = r.pos;
        if (r.value > this.maxTableSize) throw new HpackError(`dynamic table size update to ${r.value} exceeds the allowed ${this.maxTableSize}`);
        this.capacity = r.value;
        this.evict();
      } else {
        // 0000xxxx without indexing, 0001xxxx never indexed: both 4-bit prefixes.
        const sensitive = (b & 0xf0) === 0x10;
        const r = this.literal(block, pos, 4);
        pos = r.pos;
        add(sensitive ? { name: r.name, value: r.value, sensitive } : { name: r.name, value: r.value });
      }
    }
    return fields;
  }

  private literal(block: Buffer, pos: number, prefixBits: number): { name: string; value: string; pos: number } {
    const r = decodeInteger(block, pos, prefixBits);
    let name: string;
    pos = r.pos;
    if (r.value === 0) {
      const n = decodeString(block, pos);
      name = n.value;
      pos = n.pos;
    } else {
      name = this.entry(r.value).name;
    }
    const v = decodeString(block, pos);
    return { name, value: v.value, pos: v.pos };
  }

  private entry(index: number): HeaderField {
    if (index === 0) throw new HpackError('index 0 is not a header field');
    if (index <= STATIC_TABLE.length) {
      const [name, value] = STATIC_TABLE[index - 1]!;
      return { name, value };
    }
    const entry = this.dynamic[index - STATIC_TABLE.length - 1];
    if (entry === undefined) throw new HpackError(`index ${index} is past the end of the dynamic table`);
    return entry;
  }

  private insert(field: HeaderField): void {
    const size = field.name.length + field.value.length + ENTRY_OVERHEAD;
    if (size > this.capacity) {
      // An entry larger than the table empties it and is not added.
      this.dynamic.length = 0;
      this.size = 0;
      return;
    }
    this.dynamic.unshift(field);
    this.size += size;
    this.evict();
  }

  private evict(): void {
    while (this.size > this.capacity) {
      const old = this.dynamic.pop()!;
      this.size -= old.name.length + old.value.length + ENTRY_OVERHEAD;
    }
  }
}

/** A header block of literals without indexing (never indexed where the field asks), names by static index where possible. */
export function encodeHeaderBlock(fields: readonly HeaderField[]): Buffer {
  const out: number[] = [];
  for (const f of fields) {
    const nameIndex = STATIC_TABLE.findIndex(([name]) => name === f.name) + 1;
    encodeInteger(out, nameIndex, 4, f.sensitive === true ? 0x10 : 0x00);
    if (nameIndex === 0) encodeString(out, f.name);
    encodeString(out, f.value);
  }
  return Buffer.from(out);
}
