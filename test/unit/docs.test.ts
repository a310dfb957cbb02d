// The docs stay true mechanically where they can: docs/flags.md is what the
// built CLIs' --help prints now (`npm run docs:flags` regenerates it), the
// README stays a five-minute read (≤ 15 KB; the rest lives in docs/), and every
// relative link in README.md and docs/*.md reaches a file and, with #anchor, a
// heading in it.

import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';
import { HELP_COMMANDS, renderFlagsDoc, startHelp } from '../../hack/flags-doc.js';
import { harness } from '../support/harness.js';
import { repoRoot } from '../support/upstream.js';

const ROOT = repoRoot();
const README_LIMIT = 15 * 1024;

/** README.md and every docs/*.md, as absolute paths. */
function docFiles(): string[] {
  const docs = join(ROOT, 'docs');
  return [
    join(ROOT, 'README.md'),
    ...readdirSync(docs)
      .filter((n) => n.endsWith('.md'))
      .map((n) => join(docs, n)),
  ];
}

/** The text outside fenced code blocks and inline code, where links are links. */
function prose(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '').replace(/`[^`\n]*`/g, '');
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  const withoutCode = markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '');
  for (const m of withoutCode.matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const text = m[1]!.replace(/\[([^\]]*)\]\([^)]*\)/g, '$1').replace(/[`*]/g, '');
    const base = text
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

/** Every relative link `[text](target)` outside code. */
function relativeLinks(markdown: string): string[] {
  const links: string[] = [];
  for (const m of prose(markdown).matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
    const target = m[1]!;
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
    links.push(target);
  }
  return links;
}

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

test('the README is a five-minute read: at most 15 KB', () => {
  const size = statSync(join(ROOT, 'README.md')).size;
  assert.ok(size <= README_LIMIT, `README.md is ${size} bytes, over ${README_LIMIT}: move the detail to docs/`);
});

test('every relative link in README.md and docs/*.md reaches its file and heading', () => {
  const broken: string[] = [];
  for (const file of docFiles()) {
    for (const link of relativeLinks(readFileSync(file, 'utf8'))) {
      const [path = '', anchor] = link.split('#', 2);
      const target = path === '' ? file : resolve(dirname(file), decodeURIComponent(path));
      const where = `${relative(ROOT, file)}: (${link})`;
      if (!existsSync(target)) {
        broken.push(`${where} no such file`);
        continue;
      }
      if (anchor === undefined) continue;
      if (!target.endsWith('.md') || statSync(target).isDirectory()) {
        broken.push(`${where} an anchor into a file that is not Markdown`);
        continue;
      }
      if (!headingAnchors(readFileSync(target, 'utf8')).has(anchor)) broken.push(`${where} no heading with that anchor`);
    }
  }
  assert.deepEqual(broken, []);
});

test('heading anchors are spelled as GitHub spells them', () => {
  const anchors = headingAnchors('# Flags\n## The `agents` command\n## Logs, metrics & health\n```\n# not a heading\n```\n## Logs, metrics & health\n');
  assert.deepEqual([...anchors], ['flags', 'the-agents-command', 'logs-metrics--health', 'logs-metrics--health-1']);
});
