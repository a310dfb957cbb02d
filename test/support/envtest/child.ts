// One control-plane process: output to a file in the run's folder (its tail
// goes into any start-up error), SIGTERM then SIGKILL on stop.

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { readFile } from 'node:fs/promises';

export class ControlPlaneProcess {
  private readonly child: ChildProcess;
  private readonly exit: Promise<void>;

  constructor(
    readonly name: string,
    bin: string,
    args: string[],
    readonly logFile: string,
    /** A command it runs under, e.g. `['ip', 'netns', 'exec', 'cloud-1a2b']`. */
    prefix: string[] = [],
  ) {
    const out = createWriteStream(logFile);
    const [command, ...argv] = [...prefix, bin, ...args];
    this.child = spawn(command!, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.child.stdout!.pipe(out, { end: false });
    this.child.stderr!.pipe(out, { end: false });
    this.exit = once(this.child, 'exit').then(() => {
      out.end();
    });
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** The last lines of its output, for error messages. */
  async tail(lines = 30): Promise<string> {
    try {
      return (await readFile(this.logFile, 'utf8')).trimEnd().split('\n').slice(-lines).join('\n');
    } catch {
      return '(no output)';
    }
  }

  async stop(graceMs = 5000): Promise<void> {
    if (this.running) {
      this.child.kill('SIGTERM');
      const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
      await this.exit;
      clearTimeout(timer);
    }
    await this.exit;
  }
}
