// Arrays of objects that are arrays of objects from birth. V8 makes `[]` and
// `new Array(n)` arrays of small integers, and the first object stored turns
// each into an array of objects. A per-connection or per-link array (a
// relay's queue, a packet stream's decoded packets, a resend ring) changes
// kind on its first packet, and the code V8 optimised on arrays that changed
// long ago is thrown away ("not a Smi", "wrong map") when a fresh one comes:
// the first real link and connection after the start-up rehearsal deoptimised
// the deframer, the relay and the resend ring (bench/README.md, "Cold start").

/** An empty array already of the object kind. */
export function objectArray<T>(): T[] {
  const a: T[] = [undefined as T];
  a.length = 0;
  return a;
}

/** `length` slots (0 too), each undefined, of the holey object kind: `new Array(length)` starts as small integers. */
export function objectSlots<T>(length: number): Array<T | undefined> {
  const a = new Array<T | undefined>(Math.max(1, length)).fill(undefined);
  a.length = length;
  return a;
}
