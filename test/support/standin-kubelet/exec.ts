// What an exec/attach "runs" in the stand-in: the stream options a kubelet
// reads from the query, and a tiny made-up container behaviour.
//
//   echo ARGS...  prints ARGS joined by spaces and a newline, exit 0
//   true / false  exit 0 / exit 1
//   anything else with stdin (and attach): echoes stdin to stdout until stdin closes, exit 0
//   anything else without stdin: no output, exit 0

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
  exitCode: number;
}

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
  if (cmd === 'echo') return { output: Buffer.from(`${args.join(' ')}\n`), echoStdin: false, exitCode: 0 };
  if (cmd === 'true') return { output: Buffer.alloc(0), echoStdin: false, exitCode: 0 };
  if (cmd === 'false') return { output: Buffer.alloc(0), echoStdin: false, exitCode: 1 };
  return { output: Buffer.alloc(0), echoStdin: opts.stdin, exitCode: 0 };
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
