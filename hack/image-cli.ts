// npm run image -- build [--tag NAME] [--archive PATH]: our Dockerfile built with
// buildah on a local Node base, no registry needed (hack/image.ts says how).
// npm run image -- export PATH [--tag NAME]: the image as an OCI archive for
// `ctr -n k8s.io images import --base-name <NAME without tag> PATH`.

import { parseArgs } from 'node:util';
import { buildImage, exportImage, imageSkipReason, LOCAL_IMAGE } from './image.js';

const USAGE = 'usage: npm run image -- build [--tag NAME] [--archive PATH] | export PATH [--tag NAME]';

async function main(): Promise<number> {
  const { positionals, values } = parseArgs({
    allowPositionals: true,
    options: { tag: { type: 'string', default: LOCAL_IMAGE }, archive: { type: 'string' } },
  });
  const [command, path] = positionals;
  if (!((command === 'build' && path === undefined) || (command === 'export' && path !== undefined && values.archive === undefined))) {
    process.stderr.write(USAGE + '\n');
    return 2;
  }
  const missing = imageSkipReason();
  if (missing !== undefined) {
    process.stderr.write(`cannot build the image: ${missing}\n`);
    return 1;
  }
  const echo = process.stderr;
  const tag = command === 'build' ? await buildImage({ tag: values.tag, echo }) : values.tag;
  const archive = path ?? values.archive;
  if (archive !== undefined) {
    await exportImage(tag, archive, { echo });
    process.stdout.write(`${tag} written to ${archive}\n`);
  } else {
    process.stdout.write(`${tag} built\n`);
  }
  return 0;
}

process.exitCode = await main();
