// A FIFO of received chunks that hands out bytes from the front, copying only
// when a request spans chunks.

export class ByteQueue {
  private chunks: Buffer[] = [];
  private size = 0;

  get length(): number {
    return this.size;
  }

  /** Length of the first chunk (0 when empty): how much take() can give without copying. */
  get headLength(): number {
    return this.chunks[0]?.length ?? 0;
  }

  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    this.chunks.push(chunk);
    this.size += chunk.length;
  }

  /** The first n ≤ length bytes, without removing them. */
  peek(n: number): Buffer {
    const head = this.chunks[0];
    if (head !== undefined && head.length >= n) return head.subarray(0, n);
    let k = 0;
    let bytes = 0;
    while (bytes < n && k < this.chunks.length) bytes += this.chunks[k++]!.length;
    const merged = Buffer.concat(this.chunks.slice(0, k));
    this.chunks.splice(0, k, merged);
    return merged.subarray(0, n);
  }

  /** Removes and returns the first n ≤ length bytes. */
  take(n: number): Buffer {
    if (n === 0) return Buffer.alloc(0);
    if (n > this.size) throw new RangeError(`asked for ${n} bytes, ${this.size} queued`);
    this.size -= n;
    const head = this.chunks[0]!;
    if (head.length === n) {
      this.chunks.shift();
      return head;
    }
    if (head.length > n) {
      this.chunks[0] = head.subarray(n);
      return head.subarray(0, n);
    }
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    while (filled < n) {
      const c = this.chunks[0]!;
      const k = Math.min(c.length, n - filled);
      c.copy(out, filled, 0, k);
      filled += k;
      if (k === c.length) this.chunks.shift();
      else this.chunks[0] = c.subarray(k);
    }
    return out;
  }
}
