// exec/attach over SPDY/3.1 (the remotecommand protocols v4..v1): the client
// opens one stream per standard stream, each with a `streamtype` header
// (error, stdin, stdout, stderr, resize). Once all the query asked for are
// there, the made-up command runs: output on stdout, stdin echoed, then the
// status on the error stream (JSON from v4 on, plain text before, nothing on
// success before v4), every stream ended, GOAWAY.

import type { Logger } from '../../../pkg/log/logger.js';
import { exitStatusJSON, type ExecPlan, type StreamOptions } from './exec.js';
import { RST_STATUS } from './spdy-frames.js';
import type { SpdySession } from './spdy-session.js';
import type { SpdyStream } from './spdy-stream.js';

export const SPDY_EXEC_PROTOCOLS = ['v4.channel.k8s.io', 'v3.channel.k8s.io', 'v2.channel.k8s.io', 'channel.k8s.io'] as const;

export interface SpdyExecOptions {
  session: SpdySession;
  protocol: string;
  options: StreamOptions;
  plan: ExecPlan;
  /** kubelet's --streaming-connection... stream creation timeout; the session is closed if streams are missing after it. */
  streamCreationTimeoutMs: number;
  logger: Logger;
}

function expectedStreams(o: StreamOptions, protocol: string): Set<string> {
  const want = new Set(['error']);
  if (o.stdin) want.add('stdin');
  if (o.stdout) want.add('stdout');
  if (o.stderr) want.add('stderr');
  if (o.tty && (protocol === 'v3.channel.k8s.io' || protocol === 'v4.channel.k8s.io')) want.add('resize');
  return want;
}

function endAndWait(s: SpdyStream | undefined): Promise<void> {
  if (s === undefined || s.destroyed || s.writableFinished) return Promise.resolve();
  return new Promise((resolve) => {
    s.once('finish', resolve);
    s.once('close', resolve);
    s.end();
  });
}

export function serveSpdyExec(o: SpdyExecOptions): void {
  const want = expectedStreams(o.options, o.protocol);
  const streams = new Map<string, SpdyStream>();
  let running = false;

  const timer = setTimeout(() => {
    o.logger.verbose(2, 'exec: timed out waiting for client to create streams', { missing: [...want].filter((t) => !streams.has(t)) });
    o.session.close();
  }, o.streamCreationTimeoutMs);
  timer.unref();
  o.session.once('close', () => clearTimeout(timer));

  o.session.on('stream', (stream: SpdyStream) => {
    stream.on('error', (err: Error) => o.logger.verbose(2, 'exec stream error', { streamID: stream.id, error: err.message }));
    const type = stream.headers['streamtype'] ?? '';
    if (running || !want.has(type) || streams.has(type)) {
      stream.reset(RST_STATUS.protocolError);
      return;
    }
    stream.reply();
    streams.set(type, stream);
    if (streams.size === want.size) {
      clearTimeout(timer);
      running = true;
      run(o, streams).catch((err: unknown) => {
        o.logger.error('exec over SPDY failed', { error: err instanceof Error ? err.message : String(err) });
        o.session.destroy();
      });
    }
  });
}

async function run(o: SpdyExecOptions, streams: Map<string, SpdyStream>): Promise<void> {
  const stdin = streams.get('stdin');
  const stdout = streams.get('stdout');
  // The client writes nothing we need on these; keep them drained so they never stall the session.
  streams.get('error')?.resume();
  streams.get('resize')?.resume();
  if (o.plan.output.length > 0) stdout?.write(o.plan.output);
  if (stdin !== undefined) {
    if (o.plan.echoStdin && stdout !== undefined) {
      const echo = (data: Buffer): void => {
        const out = o.plan.transform(data);
        if (out.length === 0 || stdout.write(out)) return;
        // Stop reading stdin until the client has taken our output.
        stdin.pause();
        stdout.once('drain', () => stdin.resume());
      };
      stdin.on('data', echo);
      await new Promise<void>((resolve) => {
        stdin.once('end', resolve);
        stdin.once('close', resolve);
      });
      stdin.off('data', echo);
    } else {
      stdin.resume();
    }
  }
  await Promise.all([endAndWait(stdout), endAndWait(streams.get('stderr'))]);
  const error = streams.get('error');
  if (o.protocol === 'v4.channel.k8s.io') {
    error?.write(exitStatusJSON(o.plan.exitCode, o.options.command));
  } else if (o.plan.exitCode !== 0) {
    error?.write(`command terminated with non-zero exit code: exit code ${o.plan.exitCode}`);
  }
  await Promise.all([endAndWait(error), endAndWait(streams.get('resize')), endAndWait(stdin)]);
  o.session.close();
}
