// The CLIs the demo, the bench and the tests start: the bundles that users run
// (package.json's bin, the image), made by hack/bundle.mjs from tsc's modules
// in dist/cmd, so that what is tested is what ships. Importing this module
// checks that the bundles are not older than those modules: `npx tsc` alone
// leaves them stale, and a test would then run yesterday's code.

import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const SERVER_BIN = join(REPO_ROOT, 'dist/bin/yurt-tunnel-server/main.js');
export const AGENT_BIN = join(REPO_ROOT, 'dist/bin/yurt-tunnel-agent/main.js');
/** tsc's modules the bundles are made from: they run too (bench/cold-start.ts compares the two). */
export const MODULE_SERVER_BIN = join(REPO_ROOT, 'dist/cmd/yurt-tunnel-server/main.js');
export const MODULE_AGENT_BIN = join(REPO_ROOT, 'dist/cmd/yurt-tunnel-agent/main.js');
/** esbuild's metafile: which modules went into which file of dist/bin. */
export const BUNDLE_META = join(REPO_ROOT, 'dist/bin/meta.json');

export interface BundleMeta {
  inputs: Record<string, unknown>;
  outputs: Record<string, { inputs: Record<string, unknown> }>;
}

const REBUILD = 'run `npm run build` (tsc, then hack/bundle.mjs), or `node hack/bundle.mjs` after tsc';

/** The metafile; throws, saying what to run, when the bundles are missing or older than a module of ours they hold. */
export function readBundleMeta(): BundleMeta {
  let text: string;
  let made: number;
  try {
    text = readFileSync(BUNDLE_META, 'utf8');
    made = statSync(BUNDLE_META).mtimeMs;
  } catch (err: unknown) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new Error(`no bundled CLIs in dist/bin: ${REBUILD}`);
    throw err;
  }
  const meta = JSON.parse(text) as BundleMeta;
  for (const input of Object.keys(meta.inputs)) {
    if (!input.startsWith('dist/')) continue;
    let mtime: number;
    try {
      mtime = statSync(join(REPO_ROOT, input)).mtimeMs;
    } catch {
      throw new Error(`the bundled CLIs in dist/bin hold ${input}, which is gone: ${REBUILD}`);
    }
    if (mtime > made) throw new Error(`the bundled CLIs in dist/bin are older than ${input}: ${REBUILD}`);
  }
  return meta;
}

readBundleMeta();
