#!/usr/bin/env node
// Bundles each CLI, from tsc's output (dist/cmd/<cli>/main.js), into
// dist/bin/<cli>/main.js: what package.json's bin, the image and the tests run.
// Node 20 spends most of a CLI's start loading modules, and the cost is the
// number of files: `--help` from tsc's 220-270 files (commander, winston,
// prom-client, ours) took ~345 ms of CPU, from the bundle's 23 ~185 ms
// (a bare `node -e 0` 75; docs/benchmarks.md has start to ready).
// What a mode does not use stays lazy: each `import()` (ws, socks, the
// rehearsal, the iptables room, node-forge, cluster mode) becomes a chunk of
// its own in dist/bin/chunks/, loaded at first use. @kubernetes/client-node
// (ES modules, cluster mode only) stays in node_modules.
// Every output file sits three folders below the repository (dist/bin/<x>/),
// as tsc's dist/cmd/common/flags.js does: packageVersion() finds package.json
// at ../../../ from either.
// dist/bin/meta.json (esbuild's metafile) says which modules went into which
// file: test/support/loaded-packages.ts reads it to name what a CLI loaded.
// Source maps are written beside each file; `node --enable-source-maps` uses
// them (not on by default: the flag costs start time).

import { build } from 'esbuild';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const out = join(root, 'dist/bin');
const CLIS = ['yurt-tunnel-server', 'yurt-tunnel-agent'];

rmSync(out, { recursive: true, force: true });
const result = await build({
  absWorkingDir: root,
  entryPoints: CLIS.map((cli) => `dist/cmd/${cli}/main.js`),
  outbase: 'dist/cmd',
  outdir: out,
  entryNames: '[dir]/[name]',
  chunkNames: 'chunks/[name]-[hash]',
  bundle: true,
  splitting: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  external: ['@kubernetes/client-node'],
  // The CommonJS packages bundled (commander, winston, prom-client, …) call require() for Node's own modules.
  banner: { js: "import { createRequire as __ytCreateRequire } from 'node:module'; const require = __ytCreateRequire(import.meta.url);" },
  sourcemap: true,
  metafile: true,
  logLevel: 'warning',
});
// A CommonJS package that is itself the target of an import() keeps only a default export in the bundle (Node
// gives it named ones): the import() would find its names undefined at run time. Import it through a module of
// ours that re-exports the names (pkg/agent/proxy/socks-client.ts).
for (const [file, o] of Object.entries(result.metafile.outputs)) {
  if (o.entryPoint?.includes('node_modules/') && o.exports.length === 1 && o.exports[0] === 'default') {
    throw new Error(`${file}: import() of the CommonJS package ${o.entryPoint} keeps only its default export; import it through a module of ours`);
  }
}
writeFileSync(join(out, 'meta.json'), JSON.stringify(result.metafile));
