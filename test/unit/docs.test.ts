// docs/flags.md is what the built CLIs' --help prints now (`npm run
// docs:flags` regenerates it), so the flags reference cannot drift.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { HELP_COMMANDS, renderFlagsDoc, startHelp } from '../../hack/flags-doc.js';
import { harness } from '../support/harness.js';
import { repoRoot } from '../support/upstream.js';

const ROOT = repoRoot();

test('docs/flags.md is what the CLIs print for --help now (npm run docs:flags)', { timeout: 60_000 }, async (t) => {
  const h = harness(t);
  const helps: string[] = [];
  for (const command of HELP_COMMANDS) {
    const { child, output } = startHelp(ROOT, command);
    h.defer(() => child.kill('SIGKILL'));
    helps.push(await output);
  }
  const want = renderFlagsDoc(helps);
  const have = readFileSync(join(ROOT, 'docs', 'flags.md'), 'utf8');
  assert.ok(have === want, "docs/flags.md differs from the CLIs' --help: run `npm run docs:flags` and commit docs/flags.md");
});
