// npm run docs:flags: writes docs/flags.md from the built CLIs' --help
// (hack/flags-doc.ts). Run it after changing a flag; test/unit/docs.test.ts
// fails until you do.

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { HELP_COMMANDS, renderFlagsDoc, startHelp } from './flags-doc.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const helps: string[] = [];
for (const command of HELP_COMMANDS) helps.push(await startHelp(root, command).output);
const path = join(root, 'docs', 'flags.md');
writeFileSync(path, renderFlagsDoc(helps));
process.stdout.write(`wrote ${path}\n`);
