// Where a V8 CPU profile's time went: self time by function and by kind
// (garbage collection, our code, Node's streams, HTTP/2, TLS, ...), for
// bench/profile.ts. Reads the .cpuprofile format Chrome DevTools opens.

import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileSummary {
  totalMs: number;
  /** Self time by kind, ms. */
  byKind: Array<[string, number]>;
  /** Self time by function, ms, largest first. */
  byFunction: Array<[string, number]>;
}

/** A coarse kind for a frame, from its URL and name. */
function kindOf(fn: string, url: string): string {
  if (fn === '(garbage collector)') return 'GC';
  if (fn === '(idle)') return 'idle';
  if (fn === '(program)') return 'native (program)';
  if (url.includes('/dist/pkg/') || url.includes('/dist/cmd/')) return 'yurt-tunnel code';
  if (url.includes('node_modules')) return 'dependencies';
  if (url.startsWith('node:internal/http2') || url.startsWith('node:http2')) return 'node:http2';
  if (url.startsWith('node:internal/streams') || url.startsWith('node:stream')) return 'node streams';
  if (url.startsWith('node:_tls') || url.startsWith('node:tls')) return 'node:tls';
  if (url.startsWith('node:net') || url.startsWith('node:internal/stream_base')) return 'node:net';
  if (url.startsWith('node:internal/timers') || url.startsWith('node:timers')) return 'timers';
  if (url.startsWith('node:')) return 'node (other)';
  if (url === '') return `native: ${fn || '(anonymous)'}`;
  return 'other';
}

function shortUrl(url: string): string {
  const i = url.indexOf('/dist/');
  return i >= 0 ? url.slice(i + 6) : url;
}

export function summarizeProfile(file: string, top = 25): ProfileSummary {
  const p = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  for (let i = 0; i < p.samples.length; i++) {
    const id = p.samples[i]!;
    self.set(id, (self.get(id) ?? 0) + (p.timeDeltas[i] ?? 0));
  }
  const kinds = new Map<string, number>();
  const fns = new Map<string, number>();
  let total = 0;
  for (const [id, us] of self) {
    const { functionName, url, lineNumber } = byId.get(id)!.callFrame;
    const ms = us / 1000;
    total += ms;
    const kind = kindOf(functionName, url);
    kinds.set(kind, (kinds.get(kind) ?? 0) + ms);
    const key = url === '' ? functionName || '(anonymous)' : `${functionName || '(anonymous)'} ${shortUrl(url)}:${lineNumber + 1}`;
    fns.set(key, (fns.get(key) ?? 0) + ms);
  }
  const sorted = (m: Map<string, number>): Array<[string, number]> => [...m].sort((a, b) => b[1] - a[1]);
  return { totalMs: total, byKind: sorted(kinds), byFunction: sorted(fns).slice(0, top) };
}

export function formatSummary(s: ProfileSummary): string {
  const busy = s.totalMs - (s.byKind.find(([k]) => k === 'idle')?.[1] ?? 0);
  const pct = (ms: number): string => `${((ms / busy) * 100).toFixed(1).padStart(5)} %`;
  const lines = [`  busy ${busy.toFixed(0)} ms of ${s.totalMs.toFixed(0)} ms profiled; by kind (share of busy time):`];
  for (const [k, ms] of s.byKind) if (k !== 'idle') lines.push(`    ${pct(ms)}  ${k}`);
  lines.push('  by function (self time):');
  for (const [f, ms] of s.byFunction) if (f !== '(idle)') lines.push(`    ${pct(ms)}  ${f}`);
  return lines.join('\n');
}
