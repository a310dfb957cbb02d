// Only pkg/mux/socket-relay.ts still uses this (engineer core is rewriting
// that file; `[]` replaces it there, then this file goes). It made an empty
// array of V8's object elements kind, so that the first object stored did not
// change the kind and throw away code optimised on older arrays. Re-measured
// against plain arrays (npm run bench -- compare, alternated with
// Konnectivity): no difference beyond the noise of a loaded machine.

/** An empty array already of the object kind. */
export function objectArray<T>(): T[] {
  const a: T[] = [undefined as T];
  a.length = 0;
  return a;
}
