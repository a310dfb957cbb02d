// The NODE_OPTIONS a manifest under manifests/base gives its container, for the
// tests that check the CLIs' Node.js options reach them where they are deployed.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { repoRoot } from './upstream.js';

/** The value of the first `- name: NODE_OPTIONS` in manifests/base/<file>; fails the test if there is none. */
export async function manifestNodeOptions(file: string): Promise<string> {
  const yaml = await readFile(join(repoRoot(), 'manifests/base', file), 'utf8');
  const found = /^\s*- name: NODE_OPTIONS\n\s*value: (.*)$/m.exec(yaml);
  assert.ok(found !== null, `${file} sets NODE_OPTIONS`);
  return found[1]!;
}
