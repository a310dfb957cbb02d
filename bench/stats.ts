// Percentiles of samples, and the median and spread of a figure over rounds.

export function percentile(samples: readonly number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export function median(values: readonly number[]): number {
  return percentile(values, 50);
}

/** One figure over rounds: its median and its range. */
export interface Spread {
  median: number;
  min: number;
  max: number;
  n: number;
}

export function spread(values: readonly number[]): Spread | undefined {
  if (values.length === 0) return undefined;
  return { median: median(values), min: Math.min(...values), max: Math.max(...values), n: values.length };
}

/** "317 (305–340)" with `digits` decimals. */
export function formatSpread(s: Spread | undefined, digits: number): string {
  if (s === undefined) return '–';
  const f = (v: number): string => v.toFixed(digits);
  return s.n === 1 ? f(s.median) : `${f(s.median)} (${f(s.min)}–${f(s.max)})`;
}
