// Loaded into a process with `node --import <this file>` (bench only): every
// YT_MEMORY_PROBE_MS (default 50) ms it prints one line to stderr,
//   yt-memory {"rss":…,"heapTotal":…,"heapUsed":…,"external":…,"arrayBuffers":…}
// so that a parent can follow the process's memory without an inspector.

const everyMs = Number(process.env.YT_MEMORY_PROBE_MS ?? 50);
const timer = setInterval(() => {
  process.stderr.write(`yt-memory ${JSON.stringify(process.memoryUsage())}\n`);
}, everyMs);
timer.unref();
