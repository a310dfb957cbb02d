// The kubectl commands users run against pods (issue 34 item 6), on the local
// cluster (hack/cluster): each a real kubectl in the cloud namespace, against
// a busybox pod that prints a numbered line every 200 ms and serves /www over
// HTTP on port 8000 (busybox httpd). Every check returns what it saw; the
// caller asserts.

import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUSYBOX_IMAGE } from '../../hack/cluster/images.js';
import { kubectl, kubectlCommand, mustKubectl } from '../../hack/cluster/kubectl.js';
import { CLOUD } from '../../hack/cluster/topology.js';
import { run } from '../../hack/image.js';

export const MATRIX_PORT = 8000;
const LINE = /^line \d+$/;
/** How long a stream may take to show its first line. */
const FIRST_LINE_MS = 20_000;

/** The pod the matrix runs against on `node`. */
export function matrixPod(node: string): object {
  const script = `mkdir -p /www && httpd -p ${MATRIX_PORT} -h /www && i=0; while true; do i=$((i+1)); echo line $i; sleep 0.2; done`;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: matrixPodName(node), namespace: 'default' },
    spec: { nodeName: node, containers: [{ name: 'c', image: BUSYBOX_IMAGE, imagePullPolicy: 'Never', command: ['sh', '-c', script] }] },
  };
}

export const matrixPodName = (node: string): string => `mx-${node}`;

const sha256 = (data: Buffer): string => createHash('sha256').update(data).digest('hex');

interface Stream {
  stdout: string;
  stderr: string;
  /** The exit code when kubectl ended by itself within the time, else undefined (still running: we ended it). */
  exited: number | undefined;
}

/**
 * Runs kubectl until `ms` after its first numbered line (at most FIRST_LINE_MS
 * for that line: kubectl's start and the stream's setup are not what is
 * measured, and take seconds on a loaded machine), or until it exits; then ends it.
 */
function streamFor(args: string[], ms: number): Promise<Stream> {
  const [command, ...prefix] = kubectlCommand();
  return new Promise((resolve) => {
    const child = spawn(command!, [...prefix, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let exited: number | undefined;
    let timeUp = false;
    const end = (): void => {
      timeUp = true;
      child.kill('SIGTERM');
    };
    let timer = setTimeout(end, FIRST_LINE_MS + ms);
    let counting = false;
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      stdout += d;
      if (!counting && stdout.split('\n').some((l) => LINE.test(l))) {
        counting = true;
        clearTimeout(timer);
        timer = setTimeout(end, ms);
      }
    });
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    // kubectl exits with a code on SIGTERM too: only an exit before the time is up is its own.
    child.on('exit', (code, signal) => {
      if (!timeUp) exited = code ?? (signal === null ? -1 : 128);
    });
    child.on('close', () => {
      clearTimeout(timer);
      resolve({ stdout, stderr, exited });
    });
  });
}

/** New numbered lines a stream shows in the 2 s after its first, and whether it was still running then. */
async function linesFor(args: string[]): Promise<{ lines: number; running: boolean; stderr: string }> {
  const s = await streamFor(args, 2000);
  return { lines: s.stdout.split('\n').filter((l) => LINE.test(l)).length, running: s.exited === undefined, stderr: s.stderr.trim() };
}

/** `kubectl port-forward` to the pod's httpd; GETs `path` from inside the cloud namespace (where kubectl listens). */
async function portForwardGet(pod: string, path: string, into: string): Promise<Buffer> {
  const [command, ...prefix] = kubectlCommand();
  const child = spawn(command!, [...prefix, 'port-forward', `pod/${pod}`, `:${MATRIX_PORT}`], { stdio: ['ignore', 'pipe', 'pipe'] });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      let out = '';
      let err = '';
      const timer = setTimeout(() => reject(new Error(`port-forward ${pod}: no port in 30 s: ${out}${err}`)), 30_000);
      child.stdout.setEncoding('utf8').on('data', (d: string) => {
        out += d;
        const m = /Forwarding from 127\.0\.0\.1:(\d+)/.exec(out);
        if (m !== null) {
          clearTimeout(timer);
          resolve(Number(m[1]));
        }
      });
      child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
      child.on('close', (code) => {
        clearTimeout(timer);
        reject(new Error(`port-forward ${pod} ended (${code}): ${err.trim()}`));
      });
    });
    await run('nsenter', [`--net=/run/netns/${CLOUD.netns}`, '--', 'curl', '-sSf', '--max-time', '30', '-o', into, `http://127.0.0.1:${port}${path}`]);
    return readFileSync(into);
  } finally {
    child.kill('SIGTERM');
  }
}

export interface MatrixResult {
  logs: boolean;
  logsFollow: { lines: number; running: boolean; stderr: string };
  exec: string;
  execStdin: boolean;
  attach: { lines: number; running: boolean; stderr: string };
  cpUp: boolean;
  portForward: boolean;
  cpDown: boolean;
  metrics: boolean;
  summaryNode: string | undefined;
  /** What failed, kubectl's messages (not compared: for the assertion's message). */
  errors: string[];
}

/**
 * Every command against the matrix pod on `node`, one after the other: logs,
 * logs -f, exec, exec -i, attach, cp up (1 MiB), port-forward (GET it back),
 * cp down, the node's /metrics and /stats/summary through the API server.
 * A command that fails gives its failed value and its message in `errors`.
 */
export async function runMatrix(node: string): Promise<MatrixResult> {
  const pod = matrixPodName(node);
  const dir = mkdtempSync(join(tmpdir(), 'yt-matrix-'));
  const errors: string[] = [];
  const step = async <T>(what: string, fn: () => Promise<T>, failed: T): Promise<T> => {
    try {
      return await fn();
    } catch (err: unknown) {
      errors.push(`${what}: ${(err as Error).message}`);
      return failed;
    }
  };
  const noLines = { lines: 0, running: false, stderr: '' };
  try {
    const logs = await step('logs', async () => LINE.test((await mustKubectl(['logs', '--tail=3', pod])).split('\n')[0] ?? ''), false);
    const logsFollow = await step('logs -f', () => linesFor(['logs', '-f', '--tail=0', pod]), noLines);
    const exec = await step('exec', async () => (await mustKubectl(['exec', pod, '--', 'sh', '-c', 'echo $((6*7)) $(hostname)'])).trim(), '');
    const token = randomBytes(16).toString('hex');
    const execStdin = await step(
      'exec -i',
      async () => (await kubectl(['exec', '-i', pod, '--', 'cat'], { input: `${token}\n` })).stdout === `${token}\n`,
      false,
    );
    const attach = await step('attach', () => linesFor(['attach', pod, '-c', 'c']), noLines);
    const data = randomBytes(1 << 20);
    const up = join(dir, 'up.bin');
    writeFileSync(up, data);
    const cpUp = await step(
      'cp up',
      async () => {
        await mustKubectl(['cp', up, `default/${pod}:/www/up.bin`, '-c', 'c']);
        return (await mustKubectl(['exec', pod, '--', 'sha256sum', '/www/up.bin'])).split(' ')[0] === sha256(data);
      },
      false,
    );
    const portForward = await step('port-forward', async () => sha256(await portForwardGet(pod, '/up.bin', join(dir, 'pf.bin'))) === sha256(data), false);
    const down = join(dir, 'down.bin');
    const cpDown = await step(
      'cp down',
      async () => {
        await mustKubectl(['cp', `default/${pod}:/www/up.bin`, down, '-c', 'c']);
        return sha256(readFileSync(down)) === sha256(data);
      },
      false,
    );
    const metrics = await step(
      'metrics',
      async () => /^# TYPE kubelet_\w+/m.test(await mustKubectl(['get', '--raw', `/api/v1/nodes/${node}/proxy/metrics`])),
      false,
    );
    const summaryNode = await step(
      'stats/summary',
      async () =>
        (JSON.parse(await mustKubectl(['get', '--raw', `/api/v1/nodes/${node}/proxy/stats/summary`])) as { node?: { nodeName?: string } }).node?.nodeName,
      undefined,
    );
    return { logs, logsFollow, exec, execStdin, attach, cpUp, portForward, cpDown, metrics, summaryNode, errors };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** What every command should show on `node`'s pod (for deepEqual against runMatrix with the stream counts folded). */
export function expectedMatrix(node: string): object {
  return {
    logs: true,
    logsFollow: { atLeast3Lines: true, running: true },
    exec: `42 ${matrixPodName(node)}`,
    execStdin: true,
    attach: { atLeast3Lines: true, running: true },
    cpUp: true,
    portForward: true,
    cpDown: true,
    metrics: true,
    summaryNode: node,
  };
}

/** runMatrix's result in expectedMatrix's shape (stream counts as "at least 3"; stderr kept only when they fail; errors dropped). */
export function foldMatrix(r: MatrixResult): object {
  const fold = (s: MatrixResult['logsFollow']): object =>
    s.lines >= 3 && s.running ? { atLeast3Lines: true, running: true } : { atLeast3Lines: false, lines: s.lines, running: s.running, stderr: s.stderr };
  const { errors: _errors, ...rest } = r;
  return { ...rest, logsFollow: fold(r.logsFollow), attach: fold(r.attach) };
}
