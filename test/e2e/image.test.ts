// Our image, built from our Dockerfile the way `npm run image -- build` does
// (hack/image.ts: buildah on a local Node base, no registry): both commands
// run in it and print package.json's version, and its OCI archive is a
// layout `ctr images import` reads, every blob present and matching its digest.
// Cold (no base cached) this takes about 70 s on an idle machine, warm about 35 s.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createReadStream, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import { buildImage, exportImage, imageSkipReason, LOCAL_IMAGE, run } from '../../hack/image.js';
import { harness } from '../support/harness.js';
import { tempDir } from '../support/tunnel.js';
import { repoRoot } from '../support/upstream.js';

const skip = imageSkipReason();

interface Descriptor {
  mediaType: string;
  digest: string;
  annotations?: Record<string, string>;
}

async function sha256(path: string): Promise<string> {
  const hash = createHash('sha256');
  await pipeline(createReadStream(path), hash);
  return `sha256:${hash.digest('hex')}`;
}

function blobPath(layout: string, digest: string): string {
  return join(layout, 'blobs', ...digest.split(':'));
}

async function assertBlob(layout: string, d: Descriptor): Promise<void> {
  assert.equal(await sha256(blobPath(layout, d.digest)), d.digest, `blob ${d.mediaType}`);
}

test('the image from our Dockerfile runs both commands and exports as an OCI archive ctr can import', { skip, timeout: 300_000 }, async (t) => {
  const h = harness(t);
  const dir = await tempDir(h, 'yt-image-');
  const { version } = JSON.parse(readFileSync(join(repoRoot(), 'package.json'), 'utf8')) as { version: string };

  const image = await buildImage();
  assert.equal(image, LOCAL_IMAGE);

  const container = (await run('buildah', ['from', '--pull-never', image])).trim();
  h.defer(() => run('buildah', ['rm', container]));
  for (const command of ['yurt-tunnel-server', 'yurt-tunnel-agent']) {
    const out = await run('buildah', ['run', '--isolation', 'chroot', container, '--', command, '--version']);
    assert.equal(out.trim(), version, `${command} --version`);
  }
  // Non-root by default, as the manifests expect.
  assert.equal((await run('buildah', ['run', '--isolation', 'chroot', container, '--', 'id', '-u'])).trim(), '1000');

  const archive = join(dir, 'yurt-tunnel.tar');
  await exportImage(image, archive);
  const layout = join(dir, 'layout');
  mkdirSync(layout);
  await run('tar', ['-xf', archive, '-C', layout]);
  assert.deepEqual(JSON.parse(readFileSync(join(layout, 'oci-layout'), 'utf8')), { imageLayoutVersion: '1.0.0' });
  const index = JSON.parse(readFileSync(join(layout, 'index.json'), 'utf8')) as { manifests: Descriptor[] };
  assert.equal(index.manifests.length, 1);
  const [entry] = index.manifests;
  assert.ok(entry);
  assert.equal(entry.mediaType, 'application/vnd.oci.image.manifest.v1+json');
  // ctr import --base-name localhost/yurt-tunnel keeps this name.
  assert.equal(entry.annotations?.['org.opencontainers.image.ref.name'], image);
  await assertBlob(layout, entry);
  const manifest = JSON.parse(readFileSync(blobPath(layout, entry.digest), 'utf8')) as { config: Descriptor; layers: Descriptor[] };
  assert.ok(manifest.layers.length > 0);
  for (const d of [manifest.config, ...manifest.layers]) await assertBlob(layout, d);
  const config = JSON.parse(readFileSync(blobPath(layout, manifest.config.digest), 'utf8')) as { config: { User?: string } };
  assert.equal(config.config.User, 'node');
});
