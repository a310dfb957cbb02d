// The bench command's line, checked without running a benchmark: the
// scenarios it offers, the one parser that turns a wrong scenario, option or
// value into exit 2 with the usage, and the docs naming only commands that
// exist (one `bench` script, no `bench:*` left behind).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { UsageError } from '../../bench/options.js';
import { DEFAULT_SCENARIO, SCENARIOS, parseBenchArgs } from '../../bench/scenarios.js';
import { harness } from '../support/harness.js';
import { runProcess } from '../support/processes.js';
import { repoRoot } from '../support/upstream.js';

const BENCH = join(repoRoot(), 'dist/bench/main.js');
const NAMES = ['compare', 'scale', 'slow-link', 'cold-start', 'idle-curve', 'warm-curve', 'resume-memory', 'flood'];

test('the scenarios, compare the default', () => {
  assert.deepEqual(
    SCENARIOS.map((s) => s.name),
    NAMES,
  );
  assert.equal(DEFAULT_SCENARIO, 'compare');
});

test('a command line picks its scenario and options without starting anything', () => {
  const none = parseBenchArgs([]);
  assert.equal(none.kind === 'run' && none.scenario.name, 'compare');
  const options = parseBenchArgs(['--rounds', '1', '--only', 'ours,konnectivity']);
  assert.equal(options.kind === 'run' && options.scenario.name, 'compare');
  const slow = parseBenchArgs(['slow-link', '--rounds', '1', '--seconds', '2', '--json', '/tmp/x.json']);
  assert.ok(slow.kind === 'run');
  assert.equal(slow.scenario.name, 'slow-link');
  assert.equal(slow.json, '/tmp/x.json');
  const cold = parseBenchArgs(['cold-start', '--rounds', '1', 'off||--startup-rehearsal=false', 'on||', 'modules||||modules']);
  assert.equal(cold.kind === 'run' && cold.scenario.name, 'cold-start');
  assert.deepEqual(parseBenchArgs(['scale', '--help']), { kind: 'help' });
});

test('an unknown scenario, option or pair, a missing or wrong value, or a stray argument is a UsageError', () => {
  for (const [argv, message] of [
    [['nope'], /^unknown scenario nope$/],
    [['compare', '--bogus'], /^compare: Unknown option '--bogus'/],
    [['--scale'], /^compare: Unknown option '--scale'/],
    [['compare', 'extra'], /^compare: Unexpected argument 'extra'/],
    [['compare', '--only', 'nobody'], /^unknown pair nobody \(ours, ours-noresume, ours-ws, konnectivity, go-agent\)$/],
    [['scale', '--rate'], /^scale: Option '--rate <value>' argument missing/],
    [['slow-link', '--rate', 'x'], /^--rate takes a number from 16 to 100000, not x$/],
    [['idle-curve', '--idle', '10,soon'], /^--idle takes numbers from 0 to 600, comma-separated, not 10,soon$/],
    [['flood', '--env', 'NOEQUALS'], /^--env takes K=V pairs separated by spaces, not NOEQUALS$/],
    [['cold-start', '|x|y'], /^a configuration is 'label\|node args\|server\+agent flags\[\|warm round trips\[\|bundle or modules\]\]', not \|x\|y$/],
    [['cold-start', 'a||||tsc'], /^a configuration is .*, not a\|\|\|\|tsc$/],
  ] as const) {
    assert.throws(
      () => parseBenchArgs(argv),
      (err: unknown) => err instanceof UsageError && message.test(err.message),
      argv.join(' '),
    );
  }
});

test('the command exits 2 with the usage on a wrong command line, 0 with it on --help', { timeout: 60_000 }, async (t) => {
  const h = harness(t);
  for (const [argv, message] of [
    [['nope'], 'bench: unknown scenario nope'],
    [['slow-link', '--bogus'], "bench: slow-link: Unknown option '--bogus'"],
    [['warm-curve', '--batches', '0'], 'bench: --batches takes a number from 1 to 1000, not 0'],
    // Run without --expose-gc (npm run bench gives it): its Buffer figures would be off, so it does not start.
    [['resume-memory', '--connections', '1'], 'bench: resume-memory needs node --expose-gc (npm run bench runs node with it)'],
  ] as const) {
    const r = await runProcess(h, BENCH, [...argv]);
    assert.equal(r.code, 2, `${argv.join(' ')}: ${r.output}`);
    const lines = r.output.split('\n');
    assert.equal(lines[0], message);
    assert.equal(lines[1], 'usage: npm run bench -- [scenario] [options] [--json FILE]');
  }
  const help = await runProcess(h, BENCH, ['--help']);
  assert.equal(help.code, 0);
  for (const name of NAMES) assert.match(help.output, new RegExp(`^ {2}${name} +\\S`, 'm'), name);
});

test('package.json has one bench script, and the docs name it as it runs', () => {
  const scripts = (JSON.parse(readFileSync(join(repoRoot(), 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
  assert.deepEqual(
    Object.keys(scripts).filter((s) => s.startsWith('bench')),
    ['bench'],
  );
  assert.match(scripts.bench!, /node --expose-gc dist\/bench\/main\.js$/);
  for (const doc of ['README.md', 'bench/README.md']) {
    const text = readFileSync(join(repoRoot(), doc), 'utf8');
    assert.equal(/bench:[a-z][\w-]*/.exec(text)?.[0], undefined, `${doc} names a bench:* script`);
    assert.equal(/node dist\/bench\/(?!main\.js)\S*/.exec(text)?.[0], undefined, `${doc} runs a bench file other than main.js`);
    for (const m of text.matchAll(/npm run bench -- ([a-z][a-z-]*)/g)) assert.ok(NAMES.includes(m[1]!), `${doc}: npm run bench -- ${m[1]}`);
  }
  const benchReadme = readFileSync(join(repoRoot(), 'bench/README.md'), 'utf8');
  for (const name of NAMES.slice(1)) assert.ok(new RegExp(`npm run bench -- ${name}\\b`).test(benchReadme), `bench/README.md shows how to run ${name}`);
});
