// The bench command's scenarios and its one argument parser (node:util
// parseArgs): `[scenario] [options]`, the scenario `compare` when none is
// named. Parsing runs no benchmark: a wrong scenario, option or value is a
// UsageError before anything starts.

import { parseArgs } from 'node:util';
import { coldStartScenario } from './cold-start.js';
import { compareScenario } from './compare.js';
import { floodScenario } from './flood.js';
import { idleCurveScenario } from './idle-curve.js';
import { UsageError, type OptionValues, type Scenario } from './options.js';
import { resumeMemoryScenario } from './resume-memory.js';
import { scaleScenario } from './scale.js';
import { slowLinkScenario } from './slow-link.js';
import { warmCurveScenario } from './warm-curve.js';

export const SCENARIOS: readonly Scenario[] = [
  compareScenario,
  scaleScenario,
  slowLinkScenario,
  coldStartScenario,
  idleCurveScenario,
  warmCurveScenario,
  resumeMemoryScenario,
  floodScenario,
];

export const DEFAULT_SCENARIO = compareScenario.name;

export type BenchCommand =
  { kind: 'help' } | { kind: 'run'; scenario: Scenario; run: () => Promise<unknown>; /** Where the figures go as JSON. */ json: string | undefined };

export function usage(): string {
  const lines = [
    'usage: npm run bench -- [scenario] [options] [--json FILE]',
    '       (node --expose-gc dist/bench/main.js [scenario] [options] [--json FILE], after npm run build)',
    '',
    `scenarios (${DEFAULT_SCENARIO} when none is named):`,
  ];
  for (const s of SCENARIOS) lines.push(`  ${s.name.padEnd(16)}${s.summary}`, `  ${''.padEnd(16)}${s.usage}`);
  lines.push('', 'every scenario: --json FILE writes its figures as JSON; --help prints this. bench/README.md says how to read each.');
  return lines.join('\n');
}

/** The command line after `npm run bench --`; a UsageError when it names no scenario, an unknown option or a wrong value. */
export function parseBenchArgs(argv: readonly string[]): BenchCommand {
  const named = argv[0] !== undefined && !argv[0].startsWith('-');
  const name = named ? argv[0]! : DEFAULT_SCENARIO;
  const rest = named ? argv.slice(1) : [...argv];
  if (name === 'help' || rest.includes('--help') || rest.includes('-h')) return { kind: 'help' };
  const scenario = SCENARIOS.find((s) => s.name === name);
  if (scenario === undefined) throw new UsageError(`unknown scenario ${name}`);
  let values: OptionValues;
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args: rest,
      options: { ...scenario.options, json: { type: 'string' } },
      allowPositionals: scenario.positionals === true,
      strict: true,
    }));
  } catch (err: unknown) {
    // parseArgs' own TypeErrors (ERR_PARSE_ARGS_*): an unknown option, a missing value, a stray argument.
    throw new UsageError(`${scenario.name}: ${err instanceof Error ? err.message : String(err)}`);
  }
  const json = values.json;
  return { kind: 'run', scenario, run: scenario.prepare(values, positionals), json: typeof json === 'string' ? json : undefined };
}
