// The rules of the house that the compiler does not check, read from the
// sources under pkg/: no circle between rooms (folders) or between files, no
// import of a room that stands higher (docs/architecture.md, Rooms), the
// packet switch (pkg/tunnel) free of HTTP/2 and gRPC, only pkg/kube talking
// to the Kubernetes client, nothing in pkg/ reaching into cmd/, test/, bench/
// or hack/, every error thrown in pkg/ one of ours (with a code), never a
// bare `new Error(`; and sizes a reader can hold: no file in pkg/ over 450
// lines, no function or method over 80 (read with the TypeScript compiler's
// parser), each exception named here with its reason.

import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { test } from 'node:test';
import ts from 'typescript';
import { fileURLToPath } from 'node:url';

/** The repository root: this file runs as dist/test/unit/house-imports.test.js. */
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const PKG = join(ROOT, 'pkg');

interface Source {
  /** Path under pkg/, with forward slashes. */
  path: string;
  room: string;
  text: string;
  /** Every module it imports or re-exports: pkg/-relative paths for our own, the specifier for others. */
  imports: string[];
}

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return walk(p);
    return p.endsWith('.ts') ? [p] : [];
  });
}

/** `import … from '…'`, `export … from '…'`, `import '…'` and `import('…')`. */
const IMPORT = /(?:\bfrom\s*|\bimport\s*\(?\s*)['"]([^'"]+)['"]/g;

function readSources(): Source[] {
  return walk(PKG).map((file) => {
    const path = relative(PKG, file).split(sep).join('/');
    const text = readFileSync(file, 'utf8');
    const imports = [...text.matchAll(IMPORT)].map(([, spec]) => {
      if (!spec!.startsWith('.')) return spec!;
      return relative(PKG, resolve(dirname(file), spec!))
        .split(sep)
        .join('/')
        .replace(/\.js$/, '.ts');
    });
    return { path, room: path.split('/')[0]!, text, imports };
  });
}

/** The circles of a directed graph (its strongly connected parts of more than one node, or a node on itself). */
function circles(graph: Map<string, Set<string>>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) !== index.get(v)) return;
    const part: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      part.push(w);
    } while (w !== v);
    if (part.length > 1 || graph.get(v)!.has(v)) found.push(part.sort());
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return found;
}

const sources = readSources();
const ours = (s: Source): string[] => s.imports.filter((i) => !i.startsWith('node:') && !i.startsWith('..') && i.endsWith('.ts'));

test('the sources under pkg/ are found and their imports read', () => {
  assert.ok(sources.length > 100, `${sources.length} files under ${PKG}`);
  const tunnel = sources.find((s) => s.path === 'tunnel/tunnel.ts');
  assert.ok(tunnel?.imports.includes('protocol/errors.ts'), 'tunnel.ts imports protocol/errors.ts');
});

test('no room imports a room that imports it back (no folder circle)', () => {
  const graph = new Map<string, Set<string>>();
  const why = new Map<string, string>();
  for (const s of sources) {
    const edges = graph.get(s.room) ?? new Set<string>();
    graph.set(s.room, edges);
    for (const target of ours(s)) {
      const room = target.split('/')[0]!;
      if (room === s.room) continue;
      edges.add(room);
      why.set(`${s.room}>${room}`, `${s.path} imports ${target}`);
    }
  }
  const found = circles(graph).map((rooms) => {
    const inside = [...why].filter(([edge]) => rooms.includes(edge.split('>')[0]!) && rooms.includes(edge.split('>')[1]!)).map(([, w]) => w);
    return `${rooms.join(' ↔ ')}: ${inside.join('; ')}`;
  });
  assert.deepEqual(found, []);
});

/** How high each room stands (docs/architecture.md, Rooms): a room imports rooms at its level or below, never above. */
const LEVELS: Record<string, number> = {
  protocol: 0,
  log: 0,
  timers: 0,
  metrics: 0,
  net: 1,
  nodes: 1,
  mux: 1,
  grpc: 2,
  tunnel: 3,
  endpoint: 4,
  frontend: 4,
  interceptor: 4,
  certs: 4,
  kube: 4,
  dns: 5,
  iptables: 5,
  meta: 5,
  agent: 6,
  server: 6,
};

test('every room has its level, and no room imports a room above it', () => {
  const rooms = [...new Set(sources.map((s) => s.room))].sort();
  assert.deepEqual(
    rooms.filter((r) => LEVELS[r] === undefined),
    [],
    'a new room under pkg/: give it a level here and a line in docs/architecture.md',
  );
  const found = sources.flatMap((s) =>
    ours(s)
      .filter((target) => (LEVELS[target.split('/')[0]!] ?? Infinity) > LEVELS[s.room]!)
      .map((target) => `${s.path} (level ${LEVELS[s.room]}) imports ${target} (level ${LEVELS[target.split('/')[0]!]})`),
  );
  assert.deepEqual(found, []);
});

test('no file imports a file that imports it back, types included (no file circle)', () => {
  const graph = new Map(sources.map((s) => [s.path, new Set(ours(s))]));
  assert.deepEqual(circles(graph), []);
});

test('pkg/tunnel, the packet switch, imports nothing of HTTP/2, gRPC, HTTP or Kubernetes', () => {
  const banned = (i: string): boolean =>
    i === 'node:http2' ||
    i === 'node:http' ||
    i === 'node:https' ||
    i === 'node:tls' ||
    i.startsWith('grpc/') ||
    i.startsWith('endpoint/') ||
    i.startsWith('@grpc/') ||
    i.startsWith('@kubernetes/') ||
    i.startsWith('kube/');
  const found = sources.filter((s) => s.room === 'tunnel').flatMap((s) => s.imports.filter(banned).map((i) => `${s.path} imports ${i}`));
  assert.deepEqual(found, []);
});

test('only pkg/kube imports the Kubernetes client', () => {
  const found = sources
    .filter((s) => s.room !== 'kube')
    .flatMap((s) => s.imports.filter((i) => i.startsWith('@kubernetes/')).map((i) => `${s.path} imports ${i}`));
  assert.deepEqual(found, []);
});

test('nothing in pkg/ imports from cmd/, test/, bench/ or hack/', () => {
  const found = sources.flatMap((s) => s.imports.filter((i) => i.startsWith('../')).map((i) => `${s.path} imports ${i}`));
  assert.deepEqual(found, []);
});

test('pkg/ throws only errors of its own kinds: no `throw new Error(`', () => {
  const found = sources.flatMap((s) =>
    s.text
      .split('\n')
      .map((line, i) => ({ line, n: i + 1 }))
      .filter(({ line }) => /\bthrow new Error\(/.test(line))
      .map(({ line, n }) => `${s.path}:${n}: ${line.trim()}`),
  );
  assert.deepEqual(found, []);
});

/** The longest file a reader should have to hold. */
const MAX_FILE_LINES = 450;

/** Files allowed past MAX_FILE_LINES, each with the most it may hold and why (none now: add one only with its reason). */
const LONG_FILES: Record<string, { lines: number; why: string }> = {};

test(`no file in pkg/ is over ${MAX_FILE_LINES} lines, but the named exceptions, which do not grow`, () => {
  const found = sources.flatMap((s) => {
    const lines = s.text.split('\n').length - (s.text.endsWith('\n') ? 1 : 0);
    const limit = LONG_FILES[s.path]?.lines ?? MAX_FILE_LINES;
    return lines > limit ? [`${s.path}: ${lines} lines (at most ${limit})`] : [];
  });
  assert.deepEqual(found, []);
  const stale = Object.keys(LONG_FILES).filter((path) => !sources.some((s) => s.path === path));
  assert.deepEqual(stale, [], 'an exception for a file that is gone: drop it');
});

/** The longest function or method a reader should have to hold, from its first line to its last. */
const MAX_FUNCTION_LINES = 80;

/** Every function-like node with a body (functions, methods, arrows, accessors, constructors): where it starts and its length in lines. */
function functionLengths(path: string, text: string): { where: string; lines: number }[] {
  const file = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
  const found: { where: string; lines: number }[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body !== undefined) {
      const first = file.getLineAndCharacterOfPosition(node.getStart(file)).line;
      const last = file.getLineAndCharacterOfPosition(node.getEnd()).line;
      const name = ts.isConstructorDeclaration(node) ? 'constructor' : (node.name?.getText(file) ?? '(anonymous)');
      found.push({ where: `${path}:${first + 1} ${name}`, lines: last - first + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

test('the function scan sees methods, arrows and nested functions, and counts their lines', () => {
  const text = [
    'class A {',
    '  m(): void {',
    '    const f = () => {',
    '      return 1;',
    '    };',
    '  }',
    '}',
    'function g() {}',
    'class B {',
    '  constructor() {}',
    '}',
    '',
  ].join('\n');
  assert.deepEqual(functionLengths('x.ts', text), [
    { where: 'x.ts:2 m', lines: 5 },
    { where: 'x.ts:3 (anonymous)', lines: 3 },
    { where: 'x.ts:8 g', lines: 1 },
    { where: 'x.ts:10 constructor', lines: 1 },
  ]);
});

test(`no function or method in pkg/ is over ${MAX_FUNCTION_LINES} lines`, () => {
  const found = sources.flatMap((s) =>
    functionLengths(s.path, s.text)
      .filter((f) => f.lines > MAX_FUNCTION_LINES)
      .map((f) => `${f.where}: ${f.lines} lines`),
  );
  assert.deepEqual(found, []);
});
