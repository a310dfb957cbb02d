// Debian's prometheus and promtool (2.42) for the monitoring pack's tests: where
// they are (or the one reason a test skips), a real Prometheus on a loopback
// port with its storage in a temp dir, and its HTTP query API (plain
// requests without keep-alive, so nothing is left open after a test).

import { accessSync, constants } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { delimiter, join } from 'node:path';
import type { Harness } from './harness.js';
import { metaGet } from './meta-get.js';
import { startProcess } from './processes.js';
import { tempDir } from './tunnel.js';
import { freeLowPort } from '../../hack/ports.js';

function onPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    const path = join(dir, name);
    try {
      accessSync(path, constants.X_OK);
      return path;
    } catch {
      // Not in this folder.
    }
  }
  return undefined;
}

export const PROMETHEUS = onPath('prometheus');
export const PROMTOOL = onPath('promtool');

/** Why the Prometheus tests cannot run here, or undefined. */
export function prometheusSkipReason(needs: ReadonlyArray<'prometheus' | 'promtool'>): string | undefined {
  for (const name of needs) {
    if ((name === 'prometheus' ? PROMETHEUS : PROMTOOL) === undefined) return `${name} is not installed (apt-get install prometheus)`;
  }
  return undefined;
}

export interface Sample {
  metric: Record<string, string>;
  value: [number, string];
}

export interface TestPrometheus {
  url: string;
  /** An instant query's result (a vector), now. */
  query(expr: string): Promise<Sample[]>;
  lines: string[];
}

/**
 * Starts Prometheus with `config` (YAML text; `rule_files` relative to the
 * temp dir, where `files` are written too) on a loopback port, and waits until
 * it serves.
 */
export async function startPrometheus(h: Harness, config: string, files: Record<string, string> = {}): Promise<TestPrometheus> {
  if (PROMETHEUS === undefined) throw new Error('prometheus is not installed');
  const dir = await tempDir(h, 'yt-prometheus-');
  for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
  await writeFile(join(dir, 'prometheus.yml'), config);
  const port = await freeLowPort();
  const proc = startProcess(
    h,
    PROMETHEUS,
    [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--storage.tsdb.retention.time=1h',
      '--log.level=warn',
    ],
    {},
    { node: false },
  );
  const url = `http://127.0.0.1:${port}`;
  // Bounded: 30 s for the TSDB to open on a busy machine.
  for (let tries = 0; ; tries++) {
    try {
      if ((await metaGet(port, '/-/ready')).status === 200) break;
    } catch {
      // Not listening yet.
    }
    if (tries >= 300 || proc.child.exitCode !== null) throw new Error(`prometheus did not become ready:\n${proc.lines.join('\n')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  h.defer(async () => {
    proc.kill('SIGTERM');
    await proc.exited;
  });
  return {
    url,
    lines: proc.lines,
    async query(expr) {
      const res = await metaGet(port, `/api/v1/query?${new URLSearchParams({ query: expr }).toString()}`);
      const body = JSON.parse(res.body) as { status: string; error?: string; data?: { resultType: string; result: Sample[] } };
      if (body.status !== 'success' || body.data === undefined) throw new Error(`query ${expr}: ${body.error ?? res.status}`);
      if (body.data.resultType !== 'vector') throw new Error(`query ${expr}: a ${body.data.resultType}, not a vector`);
      return body.data.result;
    },
  };
}
