// Profiles on request, through the inspector, for the meta port only
// (--enable-profiling): a CPU profile of N seconds (Chrome DevTools'
// .cpuprofile JSON) and a heap snapshot (.heapsnapshot). One at a time.

import { Session } from 'node:inspector';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RawRoute } from './meta-server.js';
import { sleep } from '../timers/sleep.js';

const MAX_SECONDS = 300;
let busy = false;

function post<T>(session: Session, method: string, params?: object): Promise<T> {
  return new Promise((resolve, reject) => {
    session.post(method, params ?? {}, (err, result) => (err ? reject(err) : resolve(result as T)));
  });
}

function refuse(res: ServerResponse, status: number, message: string): void {
  res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8' });
  res.end(`${message}\n`);
}

async function exclusive(res: ServerResponse, run: () => Promise<void>): Promise<void> {
  if (busy) {
    refuse(res, 409, 'a profile is already being taken; try again when it is done');
    return;
  }
  busy = true;
  try {
    await run();
  } finally {
    busy = false;
  }
}

/** GET /debug/pprof/profile?seconds=N (default 30, at most 300). */
export const cpuProfile: RawRoute = (req: IncomingMessage, res: ServerResponse, query: URLSearchParams) =>
  exclusive(res, async () => {
    const seconds = Number(query.get('seconds') ?? '30');
    if (!Number.isFinite(seconds) || seconds <= 0 || seconds > MAX_SECONDS) {
      refuse(res, 400, `seconds must be a number in (0, ${MAX_SECONDS}]`);
      return;
    }
    const session = new Session();
    session.connect();
    try {
      await post(session, 'Profiler.enable');
      await post(session, 'Profiler.start');
      // A caller that leaves ends the profile early.
      const left = new AbortController();
      req.socket.once('close', () => left.abort());
      await sleep(seconds * 1000, left.signal);
      const { profile } = await post<{ profile: unknown }>(session, 'Profiler.stop');
      if (res.destroyed) return;
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Disposition': 'attachment; filename="yurt-tunnel.cpuprofile"' });
      res.end(JSON.stringify(profile));
    } finally {
      session.disconnect();
    }
  });

/** GET /debug/pprof/heap: a heap snapshot, streamed as the inspector produces it. */
export const heapSnapshot: RawRoute = (_req: IncomingMessage, res: ServerResponse) =>
  exclusive(res, async () => {
    const session = new Session();
    session.connect();
    try {
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Disposition': 'attachment; filename="yurt-tunnel.heapsnapshot"' });
      session.on('HeapProfiler.addHeapSnapshotChunk', (m) => res.write(m.params.chunk));
      await post(session, 'HeapProfiler.takeHeapSnapshot', { reportProgress: false });
      res.end();
    } finally {
      session.disconnect();
    }
  });

export const PROFILING_ROUTES: Record<string, RawRoute> = {
  '/debug/pprof/profile': cpuProfile,
  '/debug/pprof/heap': heapSnapshot,
};
