// npm run bench -- [scenario] [options]: the one benchmark command
// (bench/scenarios.ts lists the scenarios). Exit 2 with the usage on a wrong
// command line, 1 when a run fails; the scenario stops what it started either way.

import { writeFileSync } from 'node:fs';
import { UsageError } from './options.js';
import { parseBenchArgs, usage } from './scenarios.js';

function fail(message: string): never {
  process.stderr.write(`bench: ${message}\n\n${usage()}\n`);
  process.exit(2);
}

async function main(): Promise<void> {
  let command;
  try {
    command = parseBenchArgs(process.argv.slice(2));
  } catch (err: unknown) {
    if (err instanceof UsageError) fail(err.message);
    throw err;
  }
  if (command.kind === 'help') {
    console.log(usage());
    return;
  }
  const { scenario, run, json } = command;
  if (scenario.needsGc === true && typeof (globalThis as { gc?: unknown }).gc !== 'function') {
    fail(`${scenario.name} needs node --expose-gc (npm run bench runs node with it)`);
  }
  const started = performance.now();
  const figures = await run();
  if (json !== undefined) {
    writeFileSync(json, JSON.stringify({ scenario: scenario.name, args: process.argv.slice(2), figures }, null, 1));
    console.log(`figures: ${json}`);
  }
  console.log(`${scenario.name}: done in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}

main().catch((err: unknown) => {
  console.error(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  process.exit(1);
});
