// npm run monitoring: writes manifests/monitoring/'s derived files from
// hack/monitoring.ts. Run it after changing a rule or a panel;
// test/unit/monitoring-pack.test.ts fails until you do.

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { monitoringFiles } from './monitoring.js';

const dir = fileURLToPath(new URL('../../manifests/monitoring', import.meta.url));
for (const [name, text] of monitoringFiles()) {
  writeFileSync(join(dir, name), text);
  process.stdout.write(`wrote ${join(dir, name)}\n`);
}
