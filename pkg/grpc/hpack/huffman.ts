// HPACK's Huffman code (RFC 7541 Appendix B). The code is canonical: sorted
// by length, then by symbol, each code is the previous one plus one (shifted
// left when the length grows). So the code lengths alone define it; symbol
// 256 is EOS, which must never appear inside a string.

import { HuffmanError } from '../errors.js';

/** Code length in bits of each symbol 0..256 (RFC 7541 Appendix B). */
const CODE_LENGTHS: readonly number[] = [
  13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11,
  10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7,
  8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23,
  22, 23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23,
  23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26,
  27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27,
  27, 27, 26, 30,
];

const EOS = 256;
const MAX_LENGTH = 30;

/** Canonical decoding tables: per length, the first code, and the symbols of that length in order. */
const firstCode: number[] = new Array<number>(MAX_LENGTH + 2).fill(0);
const countOfLength: number[] = new Array<number>(MAX_LENGTH + 2).fill(0);
const offsetOfLength: number[] = new Array<number>(MAX_LENGTH + 2).fill(0);
const symbolsByCode: number[] = [];
/** Each symbol's code and length, for encoding. */
const codes: { code: number; length: number }[] = [];

(function build(): void {
  const order = CODE_LENGTHS.map((_, s) => s).sort((a, b) => CODE_LENGTHS[a]! - CODE_LENGTHS[b]! || a - b);
  let code = 0;
  let length = CODE_LENGTHS[order[0]!]!;
  for (let i = 0; i < order.length; i++) {
    const s = order[i]!;
    const len = CODE_LENGTHS[s]!;
    if (i > 0) code = (code + 1) * 2 ** (len - length);
    length = len;
    if (countOfLength[len] === 0) {
      firstCode[len] = code;
      offsetOfLength[len] = symbolsByCode.length;
    }
    countOfLength[len]!++;
    symbolsByCode.push(s);
    codes[s] = { code, length: len };
  }
})();

/** Decodes a Huffman-coded string literal; throws HuffmanError on EOS, bad padding or an unfinished code. */
export function huffmanDecode(input: Buffer): Buffer {
  const out: number[] = [];
  let code = 0;
  let length = 0;
  for (const byte of input) {
    for (let bit = 7; bit >= 0; bit--) {
      code = code * 2 + ((byte >> bit) & 1);
      length++;
      const count = countOfLength[length] ?? 0;
      if (count > 0 && code - firstCode[length]! < count && code >= firstCode[length]!) {
        const symbol = symbolsByCode[offsetOfLength[length]! + code - firstCode[length]!]!;
        if (symbol === EOS) throw new HuffmanError('EOS inside a Huffman-coded string');
        out.push(symbol);
        code = 0;
        length = 0;
      } else if (length >= MAX_LENGTH) {
        throw new HuffmanError('invalid Huffman code');
      }
    }
  }
  // What is left must be a prefix of EOS (all ones) shorter than a byte.
  if (length > 7 || code !== 2 ** length - 1) throw new HuffmanError('invalid padding after a Huffman-coded string');
  return Buffer.from(out);
}

/** Huffman-codes `input` (padded with the most significant bits of EOS). */
export function huffmanEncode(input: Buffer): Buffer {
  const out: number[] = [];
  let acc = 0;
  let bits = 0;
  for (const byte of input) {
    const { code, length } = codes[byte]!;
    for (let i = length - 1; i >= 0; i--) {
      acc = (acc << 1) | (Math.floor(code / 2 ** i) & 1);
      if (++bits === 8) {
        out.push(acc);
        acc = 0;
        bits = 0;
      }
    }
  }
  if (bits > 0) out.push(((acc << (8 - bits)) | ((1 << (8 - bits)) - 1)) & 0xff);
  return Buffer.from(out);
}
