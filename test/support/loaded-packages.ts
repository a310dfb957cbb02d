// Loaded with `node --import` into a CLI run: when the process exits it prints
//   yt-packages ["commander","prom-client",…]
// to stderr: every npm package (node_modules/<name>) in the module cache, which
// holds CommonJS packages whether required or imported from ES modules.

import { createRequire } from 'node:module';

const cache = createRequire(import.meta.url).cache;

process.on('exit', () => {
  const names = new Set<string>();
  for (const file of Object.keys(cache)) {
    const m = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(file);
    if (m !== null) names.add(m[1]!);
  }
  process.stderr.write(`yt-packages ${JSON.stringify([...names].sort())}\n`);
});
