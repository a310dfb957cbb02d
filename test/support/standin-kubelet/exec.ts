// What an exec/attach "runs" in the stand-in: the stream options a kubelet
// reads from the query, and a tiny made-up container behaviour.
//
//   echo ARGS...  prints ARGS joined by spaces and a newline, exit 0
//   true / false  exit 0 / exit 1
//   nl            numbers each stdin line: "<session> <n> <line>", <session> a
//                 random id of this exec, n from 1; exit 0 when stdin closes
//                 (tells one long-lived shell from a new one)
//   anything else with stdin (and attach): echoes stdin to stdout until stdin closes, exit 0
//   anything else without stdin: no output, exit 0

import { randomBytes } from 'node:crypto';

export type StreamKind = 'exec' | 'attach';

export interface StreamOptions {
  command: string[];
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
  tty: boolean;
}

export interface ExecPlan {
  /** Written to stdout at once. */
  output: Buffer;
  /** Echo stdin to stdout until it closes, then exit. */
  echoStdin: boolean;
  /** What is echoed for a piece of stdin (the command's state lives in it); identity unless the command says otherwise. */
  transform: (stdin: Buffer) => Buffer;
  exitCode: number;
}

/** `nl`'s echo: each complete stdin line as "<session> <n> <line>\n"; a partial line waits for its end. */
export function lineNumberer(session: string): (stdin: Buffer) => Buffer {
  let n = 0;
  let partial = Buffer.alloc(0);
  return (stdin) => {
    const text = Buffer.concat([partial, stdin]);
    const end = text.lastIndexOf(0x0a);
    partial = text.subarray(end + 1);
    if (end < 0) return Buffer.alloc(0);
    const lines = text.subarray(0, end).toString().split('\n');
    return Buffer.from(lines.map((l) => `${session} ${++n} ${l}\n`).join(''));
  };
}

const identity = (b: Buffer): Buffer => b;

/** Parses kubelet's stream options; returns the 400 message a kubelet would give, if any. */
export function parseStreamOptions(query: URLSearchParams, kind: StreamKind): StreamOptions | string {
  // kubelet: a flag is on only when its value is exactly "1".
  const flag = (name: string): boolean => query.get(name) === '1';
  const tty = flag('tty');
  const opts: StreamOptions = {
    command: kind === 'exec' ? query.getAll('command') : [],
    stdin: flag('input'),
    stdout: flag('output'),
    stderr: flag('error') && !tty, // a tty merges stderr into stdout
    tty,
  };
  if (!opts.stdin && !opts.stdout && !opts.stderr) return 'you must specify at least 1 of stdin, stdout, stderr';
  if (kind === 'exec' && opts.command.length === 0) return 'missing required command parameter';
  return opts;
}

export function planExec(opts: StreamOptions): ExecPlan {
  const [cmd, ...args] = opts.command;
  const none = Buffer.alloc(0);
  if (cmd === 'echo') return { output: Buffer.from(`${args.join(' ')}\n`), echoStdin: false, transform: identity, exitCode: 0 };
  if (cmd === 'true') return { output: none, echoStdin: false, transform: identity, exitCode: 0 };
  if (cmd === 'false') return { output: none, echoStdin: false, transform: identity, exitCode: 1 };
  if (cmd === 'nl') return { output: none, echoStdin: opts.stdin, transform: lineNumberer(randomBytes(4).toString('hex')), exitCode: 0 };
  return { output: none, echoStdin: opts.stdin, transform: identity, exitCode: 0 };
}

/** The metav1.Status JSON a kubelet writes on the error channel when the command ends. */
export function exitStatusJSON(exitCode: number, command: readonly string[]): string {
  if (exitCode === 0) return JSON.stringify({ metadata: {}, status: 'Success' });
  return JSON.stringify({
    metadata: {},
    status: 'Failure',
    message: `command terminated with non-zero exit code: error executing command [${command.join(' ')}], exit code ${exitCode}`,
    reason: 'NonZeroExitCode',
    details: { causes: [{ reason: 'ExitCode', message: String(exitCode) }] },
  });
}
