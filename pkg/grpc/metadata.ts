// Reading gRPC metadata from HTTP/2 headers. Node folds repeated headers in
// its parsed object, so repeated metadata is read from the raw list.

/** All values of metadata `name` in a raw header list (HTTP/2 names arrive lower-case). */
export function metadataValues(rawHeaders: readonly string[], name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) if (rawHeaders[i] === name) out.push(rawHeaders[i + 1]!);
  return out;
}
