// --help fits the terminal: the built CLIs at 80 columns when stdout is not a
// TTY (as commander does), and the layout at other widths: side by side when
// the description column has room, each description under its flag otherwise.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { Command } from 'commander';
import { wrapHelpToTerminal } from '../../cmd/common/help.js';
import { AGENT_BIN as AGENT, SERVER_BIN as SERVER } from '../support/processes.js';
import { harness } from '../support/harness.js';

function longest(text: string): number {
  return Math.max(...text.split('\n').map((l) => l.length));
}

test('every --help of both CLIs fits 80 columns when stdout is not a terminal', { timeout: 60_000 }, async (t) => {
  const h = harness(t);
  for (const [bin, args] of [
    [SERVER, ['--help']],
    [SERVER, ['issue-agent-cert', '--help']],
    [SERVER, ['agents', '--help']],
    [AGENT, ['--help']],
  ] as const) {
    const child = spawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    h.defer(() => child.kill('SIGKILL'));
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
    const [code] = (await once(child, 'exit')) as [number | null];
    assert.equal(code, 0);
    assert.match(out, /^Usage: /);
    assert.ok(longest(out) <= 80, `${args.join(' ')}: a line of ${longest(out)} characters`);
  }
});

test('help follows the width: beside the flags when there is room, under each flag when not', () => {
  const help = (width: number): string =>
    wrapHelpToTerminal(new Command('demo'))
      .configureOutput({ getOutHelpWidth: () => width })
      .option('--a-rather-long-flag-name-for-a-duration <duration>', 'how long the thing waits before it gives up, '.repeat(4).trim())
      .option('--short', 'a flag')
      .helpInformation();
  for (const width of [60, 80, 120, 200]) assert.ok(longest(help(width)) <= width, `width ${width}: ${longest(help(width))}`);
  // 80 columns leave 24 beside a 52-column flag: the description goes under it.
  assert.match(help(80), /\n {2}--a-rather-long-flag-name-for-a-duration <duration>\n {6}how long the thing waits/);
  // 200 leave 144: side by side, as commander lays it out.
  assert.match(help(200), /\n {2}--a-rather-long-flag-name-for-a-duration <duration> {2}how long the thing waits/);
  assert.match(help(200), /\n {2}--short {46}a flag\n/);
});
