// Module hooks registered by loaded-packages.ts (they run on Node's loader
// thread): every module loaded from node_modules through `import` is appended,
// by URL, to the file the probe named, so that ES-module packages such as
// @kubernetes/client-node, which never enter require's cache, are seen too;
// and so is every module of our own (dist/pkg, dist/cmd) and every file of the
// bundled CLIs (dist/bin).
// Written synchronously, before the module is evaluated: nothing is in flight
// when the process exits.

import { appendFileSync } from 'node:fs';
import type { InitializeHook, LoadHook } from 'node:module';

let file: string | undefined;

/** The project's own modules (dist/pkg, dist/cmd), and the bundles made of them (dist/bin). */
const OWN = /\/dist\/(pkg|cmd|bin)\//;

export const initialize: InitializeHook<{ file: string }> = (data) => {
  file = data.file;
};

export const load: LoadHook = (url, context, nextLoad) => {
  if (file !== undefined && (url.includes('/node_modules/') || OWN.test(url))) appendFileSync(file, `${url}\n`);
  return nextLoad(url, context);
};
