// Reading gRPC metadata from HTTP/2 headers. Node folds repeated headers in
// its parsed object, so repeated metadata is read from the raw list.

/** All values of metadata `name` in a raw header list (HTTP/2 names arrive lower-case). */
export function metadataValues(rawHeaders: readonly string[], name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) if (rawHeaders[i] === name) out.push(rawHeaders[i + 1]!);
  return out;
}

/**
 * Where `value` first leaves printable ASCII (0x20-0x7e), or -1. A gRPC
 * metadata value that is not binary (`-bin`) is printable ASCII by the spec;
 * node:http2 hands header bytes over as latin1, one character per byte, so
 * anything else (UTF-8 above all) would read as mojibake.
 */
export function firstNonPrintableASCII(value: string): number {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c < 0x20 || c > 0x7e) return i;
  }
  return -1;
}

/** `value` for a message: printable ASCII as is, any other byte as \xHH, cut to `max` characters of the original. */
export function quoteMetadataValue(value: string, max = 64): string {
  const shown = value.length > max ? value.slice(0, max) : value;
  const escaped = shown.replace(/[^\x20-\x7e]|["\\]/g, (ch) => {
    const c = ch.charCodeAt(0);
    if (c === 0x22 || c === 0x5c) return `\\${ch}`;
    return c <= 0xff ? `\\x${c.toString(16).padStart(2, '0')}` : `\\u{${c.toString(16)}}`;
  });
  return `"${escaped}"${value.length > max ? '...' : ''}`;
}
