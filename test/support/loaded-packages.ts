// Loaded with `node --import` into a CLI run: when the process exits it prints
//   yt-packages ["commander","prom-client",…]
//   yt-modules ["cmd/yurt-tunnel-agent/main.js","pkg/agent/app.js",…]
// to stderr: every npm package (node_modules/<name>) the process loaded, and
// every module of our own (dist/pkg, dist/cmd),
// required (the module cache holds CommonJS packages, whether required or
// imported from ES modules) or imported as an ES module (recorded by
// loaded-packages-hooks.ts, since no cache of those is open to us).
// A file of the bundled CLIs (dist/bin) counts as every package and module
// esbuild put into it (its metafile, dist/bin/meta.json): a package in a
// chunk the CLI loads is loaded, whether or not its code has run yet.

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire, register } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUNDLE_META, REPO_ROOT, type BundleMeta } from '../../hack/cli-bins.js';

const cache = createRequire(import.meta.url).cache;
const dir = mkdtempSync(join(tmpdir(), 'yt-packages-'));
const imported = join(dir, 'imported');
register(new URL('./loaded-packages-hooks.js', import.meta.url), { data: { file: imported } });

function packageOf(path: string): string | undefined {
  return /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(path)?.[1];
}

/** `paths` and, for each file of dist/bin among them, the modules it was made of (REPO_ROOT/dist/pkg/…, …/node_modules/…). */
function withBundled(paths: string[]): string[] {
  const files = paths.map((p) => /\/(dist\/bin\/.*\.js)$/.exec(p)?.[1]).filter((f) => f !== undefined);
  if (files.length === 0) return paths;
  const meta = JSON.parse(readFileSync(BUNDLE_META, 'utf8')) as BundleMeta;
  const inputs = files.flatMap((f) => Object.keys(meta.outputs[f]?.inputs ?? {}));
  return [...paths, ...inputs.map((i) => join(REPO_ROOT, i))];
}

process.on('exit', () => {
  const names = new Set<string>();
  let importedText = '';
  try {
    importedText = readFileSync(imported, 'utf8');
  } catch (err: unknown) {
    // No file: nothing was imported from node_modules.
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  rmSync(dir, { recursive: true, force: true });
  const own = new Set<string>();
  for (const path of withBundled([...Object.keys(cache), ...importedText.split('\n')])) {
    const name = packageOf(path);
    if (name !== undefined) names.add(name);
    const ours = /\/dist\/((?:pkg|cmd)\/.*)$/.exec(path)?.[1];
    if (ours !== undefined && !path.includes('/node_modules/')) own.add(ours);
  }
  process.stderr.write(`yt-packages ${JSON.stringify([...names].sort())}\n`);
  process.stderr.write(`yt-modules ${JSON.stringify([...own].sort())}\n`);
});
