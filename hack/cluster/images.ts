// Images without a registry, as OCI archives cached in CACHE_DIR by content:
// - busybox (Debian's busybox-static made into an image with umoci), tag `sh`
//   for test pods and tag `pause` (waits for TERM) as the pod sandbox;
// - our image, built from the Dockerfile by hack/image.ts, keyed by the build's
//   inputs, so an unchanged tree is not built again.
// Each node's containerd imports both (`ctr -n k8s.io images import`).

import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, copyFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { buildImage, exportImage, LOCAL_IMAGE, run, type RunOptions } from '../image.js';
import { REPO_ROOT } from '../local-tunnel.js';
import { runInNode } from './holder.js';
import { CACHE_DIR, type NodeState } from './state.js';

export const BUSYBOX_NAME = 'localhost/yt-busybox';
/** A shell: `command: [sh, -c, ...]`. */
export const BUSYBOX_IMAGE = `${BUSYBOX_NAME}:sh`;
export const PAUSE_IMAGE = `${BUSYBOX_NAME}:pause`;
export { LOCAL_IMAGE };

const BUSYBOX = '/bin/busybox';
// Bump when the recipe below changes: the cache key is the recipe and busybox's bytes.
const BUSYBOX_RECIPE = 1;

function sha256(...parts: (string | Buffer)[]): string {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest('hex').slice(0, 16);
}

/** The busybox archive, made once per busybox binary. */
export async function busyboxArchive(options: RunOptions = {}): Promise<string> {
  const archive = join(CACHE_DIR, `busybox-${sha256(String(BUSYBOX_RECIPE), readFileSync(BUSYBOX))}.tar`);
  if (existsSync(archive)) return archive;
  mkdirSync(CACHE_DIR, { recursive: true });
  const dir = mkdtempSync(join(CACHE_DIR, 'busybox-build-'));
  try {
    const layout = join(dir, 'oci');
    const bundle = join(dir, 'bundle');
    await run('umoci', ['init', '--layout', layout], options);
    await run('umoci', ['new', '--image', `${layout}:sh`], options);
    await run('umoci', ['unpack', '--image', `${layout}:sh`, bundle], options);
    const bin = join(bundle, 'rootfs', 'bin');
    mkdirSync(bin, { recursive: true });
    copyFileSync(BUSYBOX, join(bin, 'busybox'));
    const applets = (await run(BUSYBOX, ['--list'])).split('\n').filter((a) => a !== '' && a !== 'busybox');
    for (const applet of applets) symlinkSync('busybox', join(bin, applet));
    for (const d of ['tmp', 'etc', 'proc', 'sys', 'dev']) mkdirSync(join(bundle, 'rootfs', d), { recursive: true });
    await run('umoci', ['repack', '--image', `${layout}:sh`, bundle], options);
    await run('umoci', ['config', '--image', `${layout}:sh`, '--config.env', 'PATH=/bin', '--config.cmd', 'sh'], options);
    // The sandbox: sleeps until TERM.
    await run(
      'umoci',
      [
        'config',
        '--image',
        `${layout}:sh`,
        '--tag',
        'pause',
        '--config.cmd',
        'sh',
        '--config.cmd',
        '-c',
        '--config.cmd',
        "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done",
      ],
      options,
    );
    await run('tar', ['-C', layout, '-cf', `${archive}.tmp`, '.'], options);
    renameSync(`${archive}.tmp`, archive);
    return archive;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Every file the Dockerfile copies, in a stable order. */
function buildInputs(): string[] {
  const files = ['Dockerfile', 'package.json', 'package-lock.json', 'tsconfig.json'].map((f) => join(REPO_ROOT, f));
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else files.push(p);
    }
  };
  for (const d of ['cmd', 'pkg', 'proto']) walk(join(REPO_ROOT, d));
  return files;
}

/** Our image's archive: built and exported only when the Dockerfile's inputs changed since the cached one. */
export async function ourImageArchive(options: RunOptions = {}): Promise<string> {
  const h = createHash('sha256');
  for (const f of buildInputs()) h.update(relative(REPO_ROOT, f)).update('\0').update(readFileSync(f)).update('\0');
  const archive = join(CACHE_DIR, `yurt-tunnel-${h.digest('hex').slice(0, 16)}.tar`);
  if (existsSync(archive)) return archive;
  mkdirSync(CACHE_DIR, { recursive: true });
  // Older archives of our image are stale now.
  for (const name of readdirSync(CACHE_DIR)) if (/^yurt-tunnel-[0-9a-f]{16}\.tar$/.test(name)) rmSync(join(CACHE_DIR, name), { force: true });
  await buildImage(options);
  await exportImage(LOCAL_IMAGE, `${archive}.tmp`, options);
  renameSync(`${archive}.tmp`, archive);
  return archive;
}

/** Imports an archive into `node`'s containerd (its default socket in its private /run/containerd). */
export async function importImage(node: NodeState, archive: string, baseName: string): Promise<void> {
  await runInNode(node, 'ctr', ['-n', 'k8s.io', 'images', 'import', '--base-name', baseName, archive]);
}

export function imageBaseName(image: string): string {
  return image.slice(0, image.lastIndexOf(':'));
}
