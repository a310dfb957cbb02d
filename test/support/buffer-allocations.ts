// Counts the Buffers made through the public constructors (Buffer.alloc,
// allocUnsafe, allocUnsafeSlow, concat, from) while `run` is in progress, so
// a test can bound the garbage a code path makes per packet. Node's own
// internals mostly allocate otherwise; this counts what our code asks for.

type Factory = 'alloc' | 'allocUnsafe' | 'allocUnsafeSlow' | 'concat' | 'from';
const FACTORIES: Factory[] = ['alloc', 'allocUnsafe', 'allocUnsafeSlow', 'concat', 'from'];

/** Resolves with the number of Buffers created through the public factories while `run` ran. */
export async function countBufferAllocations(run: () => Promise<void>, byFactory?: Partial<Record<Factory, number>>): Promise<number> {
  let count = 0;
  // The very functions, unbound, so that the finally below puts back what was there; the wrappers call them on Buffer.
  // eslint-disable-next-line @typescript-eslint/unbound-method
  const originals = FACTORIES.map((name) => [name, Buffer[name]] as const);
  const target = Buffer as unknown as Record<Factory, (...args: unknown[]) => Buffer>;
  for (const [name, original] of originals) {
    const fn = original as unknown as (...args: unknown[]) => Buffer;
    target[name] = function (this: unknown, ...args: unknown[]): Buffer {
      count++;
      if (byFactory !== undefined) byFactory[name] = (byFactory[name] ?? 0) + 1;
      return fn.apply(Buffer, args);
    };
  }
  try {
    await run();
  } finally {
    for (const [name, original] of originals) target[name] = original as unknown as (...args: unknown[]) => Buffer;
  }
  return count;
}
