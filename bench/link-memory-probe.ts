// Loaded into the server with `node --expose-gc --import <this file>` (bench
// only, bench/link-memory.ts): on SIGUSR2 it collects garbage and prints one line
// to stderr,
//   yt-linkmem {"rss":…,"heapUsed":…,"external":…,"arrayBuffers":…,"spaces":{…}}
// and, when YT_HEAP_SNAPSHOT_DIR is set, writes a heap snapshot there too.

import { getHeapSpaceStatistics, writeHeapSnapshot } from 'node:v8';
import { join } from 'node:path';

let snapshots = 0;
process.on('SIGUSR2', () => {
  const gc = process.env.YT_PROBE_NO_GC === '1' ? undefined : (globalThis as { gc?: () => void }).gc;
  gc?.();
  gc?.();
  const spaces: Record<string, { used: number; committed: number }> = {};
  for (const s of getHeapSpaceStatistics()) spaces[s.space_name] = { used: s.space_used_size, committed: s.physical_space_size };
  const dir = process.env.YT_HEAP_SNAPSHOT_DIR;
  let snapshot: string | undefined;
  if (dir !== undefined && dir !== '') snapshot = writeHeapSnapshot(join(dir, `server-${process.pid}-${snapshots++}.heapsnapshot`));
  process.stderr.write(`yt-linkmem ${JSON.stringify({ ...process.memoryUsage(), spaces, snapshot })}\n`);
});
