// What grew between two V8 heap snapshots of one process: self size and count
// by constructor (or node type for strings, arrays, code…), largest growth
// first, and per unit when a divisor is given (e.g. the links added between
// the two, bench/link-memory.ts --snapshots).
//
//   node dist/bench/heap-diff.js BEFORE.heapsnapshot AFTER.heapsnapshot [units] [rows]

import { readFileSync } from 'node:fs';

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

/** Self size and count by class: objects by constructor name, the rest by node type. */
function tally(path: string): Map<string, { size: number; count: number }> {
  const s = JSON.parse(readFileSync(path, 'utf8')) as Snapshot;
  const fields = s.snapshot.meta.node_fields;
  const types = s.snapshot.meta.node_types[0];
  const width = fields.length;
  const iType = fields.indexOf('type');
  const iName = fields.indexOf('name');
  const iSize = fields.indexOf('self_size');
  const out = new Map<string, { size: number; count: number }>();
  for (let i = 0; i < s.nodes.length; i += width) {
    const type = types[s.nodes[i + iType]!]!;
    const name = s.strings[s.nodes[i + iName]!]!;
    const key =
      type === 'object' || type === 'closure' || type === 'native'
        ? `${type} ${name}`
        : type === 'hidden' || type === 'array'
          ? `${type} ${name.slice(0, 60)}`
          : type;
    const e = out.get(key) ?? { size: 0, count: 0 };
    e.size += s.nodes[i + iSize]!;
    e.count++;
    out.set(key, e);
  }
  return out;
}

const [before, after, unitsArg, rowsArg] = process.argv.slice(2);
if (before === undefined || after === undefined) {
  process.stderr.write('usage: heap-diff.js BEFORE AFTER [units] [rows]\n');
  process.exit(2);
}
const units = Number(unitsArg ?? 1);
const a = tally(before);
const b = tally(after);
const rows = [...b.keys(), ...[...a.keys()].filter((k) => !b.has(k))].map((k) => {
  const x = a.get(k) ?? { size: 0, count: 0 };
  const y = b.get(k) ?? { size: 0, count: 0 };
  return { k, size: (y.size - x.size) / units, count: (y.count - x.count) / units };
});
rows.sort((p, q) => q.size - p.size);
const total = rows.reduce((s, r) => s + r.size, 0);
console.log(`self size grown per unit: ${(total / 1024).toFixed(2)} KiB`);
for (const r of rows.slice(0, Number(rowsArg ?? 40))) console.log(`${r.size.toFixed(0).padStart(8)} B  ${r.count.toFixed(2).padStart(7)}×  ${r.k}`);
