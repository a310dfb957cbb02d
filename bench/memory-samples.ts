// The parent's side of bench/memory-probe: follows a child's `yt-memory` lines
// and keeps the last sample and the peak of each figure.

import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

export interface Sample {
  rss: number;
  heapTotal: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
}
export const KEYS: Array<keyof Sample> = ['rss', 'heapTotal', 'heapUsed', 'external', 'arrayBuffers'];

/** Follows a child's probe lines; `peak` is per key since the last reset. Other lines go to `onLine`. */
export class Probe {
  last: Sample | undefined;
  peak: Sample = { rss: 0, heapTotal: 0, heapUsed: 0, external: 0, arrayBuffers: 0 };
  private partial = '';

  constructor(private readonly onLine: (line: string) => void = () => {}) {}

  onText(text: string): void {
    const lines = (this.partial + text).split('\n');
    this.partial = lines.pop()!;
    for (const line of lines) {
      if (!line.startsWith('yt-memory ')) {
        this.onLine(line);
        continue;
      }
      const s = JSON.parse(line.slice('yt-memory '.length)) as Sample;
      this.last = s;
      for (const k of KEYS) this.peak[k] = Math.max(this.peak[k], s[k]);
    }
  }

  resetPeak(): void {
    this.peak = { ...(this.last ?? this.peak) };
  }

  /** A fresh sample (waits for the next probe line). */
  async next(): Promise<Sample> {
    const before = this.last;
    while (this.last === before) await sleep(10);
    return this.last!;
  }
}

/** The kernel's RSS high-water mark of `pid` (VmHWM), if readable. */
export function vmHWM(pid: number): number | undefined {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m === null ? undefined : Number(m[1]) * 1024;
  } catch {
    return undefined;
  }
}
