// Our image without a registry: the repository's Dockerfile built with
// buildah on a Node base assembled here (../shared/envtest/README.md, "Our
// image without a registry"). The base is Debian bookworm (mmdebstrap
// minbase) with this machine's node and npm and the user node (uid 1000), as
// node:20-bookworm-slim has them; it is made once and kept in buildah's
// storage. The image can be written as an OCI archive for
// `ctr -n k8s.io images import`. hack/image-cli.ts is the command;
// test/e2e/image.test.ts runs both binaries in the image.

import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT } from './local-tunnel.js';

/** The local stand-in for node:20-bookworm-slim, passed to the Dockerfile as BASE_IMAGE. */
export const LOCAL_BASE_IMAGE = 'localhost/yt-node-base:20-bookworm-slim';
export const LOCAL_IMAGE = 'localhost/yurt-tunnel:dev';

/** The Debian packages whose commands the build runs, by command. */
const TOOLS = { mmdebstrap: 'mmdebstrap', buildah: 'buildah' } as const;

// Inside the base: this machine's CA bundle (the registries npm reaches here sit behind a CA it holds).
const BASE_CA_BUNDLE = '/usr/local/share/yt-node-base/ca-certificates.crt';
const HOST_CA_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';

/** The Debian packages missing for a build, empty when none is. */
export function missingImagePackages(): string[] {
  return Object.entries(TOOLS)
    .filter(([command]) => spawnSync(command, ['--version'], { stdio: 'ignore' }).error !== undefined)
    .map(([, pkg]) => pkg);
}

/** Why the image cannot be built here (one line, the form hack/run-tests.mjs accepts), or undefined. */
export function imageSkipReason(): string | undefined {
  const missing = missingImagePackages();
  if (missing.length === 0) return undefined;
  return `${missing.join(' and ')} ${missing.length === 1 ? 'is' : 'are'} not installed (apt-get install ${missing.join(' ')})`;
}

export interface RunOptions {
  /** Where the commands' output goes as it comes; by default it is kept and shown only when a command fails. */
  echo?: NodeJS.WritableStream;
}

const KEPT_OUTPUT = 16 * 1024;

/** Runs a command to its end; resolves its stdout, rejects with the tail of its output on failure. */
export function run(command: string, args: string[], options: RunOptions = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let tail = '';
    const keep = (chunk: Buffer, isStdout: boolean): void => {
      const text = chunk.toString();
      if (isStdout && stdout.length < KEPT_OUTPUT) stdout += text;
      tail = (tail + text).slice(-KEPT_OUTPUT);
      options.echo?.write(text);
    };
    child.stdout.on('data', (chunk: Buffer) => keep(chunk, true));
    child.stderr.on('data', (chunk: Buffer) => keep(chunk, false));
    child.once('error', reject);
    child.once('close', (code, signal) => {
      if (code === 0) resolve(stdout);
      else reject(new Error(`${command} ${args.join(' ')} failed (${signal ?? `exit ${String(code)}`}):\n${tail}`));
    });
  });
}

export async function imageExists(name: string): Promise<boolean> {
  const out = await run('buildah', ['images', '--quiet', '--noheading', '--filter', `reference=${name}`]);
  return out.trim() !== '';
}

function requireTools(): void {
  const reason = imageSkipReason();
  if (reason !== undefined) throw new Error(`cannot build the image: ${reason}`);
}

/** Assembles LOCAL_BASE_IMAGE unless buildah already has it; true when it was made now. */
export async function ensureLocalBase(options: RunOptions = {}): Promise<boolean> {
  requireTools();
  if (await imageExists(LOCAL_BASE_IMAGE)) return false;
  const dir = mkdtempSync(join(tmpdir(), 'yt-node-base-'));
  let container: string | undefined;
  try {
    const rootfs = join(dir, 'rootfs.tar');
    await run('mmdebstrap', ['--variant=minbase', 'bookworm', rootfs], options);
    const c = (await run('buildah', ['from', 'scratch'], options)).trim();
    container = c;
    const inBase = (args: string[]): Promise<string> => run('buildah', ['run', '--isolation', 'chroot', c, '--', ...args], options);
    await run('buildah', ['add', c, rootfs, '/'], options);
    await run('buildah', ['copy', c, process.execPath, '/usr/local/bin/node'], options);
    await run('buildah', ['copy', c, '/usr/lib/node_modules/npm', '/usr/local/lib/node_modules/npm'], options);
    await inBase(['ln', '-s', '../lib/node_modules/npm/bin/npm-cli.js', '/usr/local/bin/npm']);
    await inBase(['ln', '-s', '../lib/node_modules/npm/bin/npx-cli.js', '/usr/local/bin/npx']);
    // The official image's user.
    await inBase(['groupadd', '--gid', '1000', 'node']);
    await inBase(['useradd', '--uid', '1000', '--gid', 'node', '--shell', '/bin/bash', '--create-home', 'node']);
    const config = ['--cmd', 'node', '--env', 'NODE_VERSION=' + process.versions.node];
    if (existsSync(HOST_CA_BUNDLE)) {
      await run('buildah', ['copy', c, HOST_CA_BUNDLE, BASE_CA_BUNDLE], options);
      config.push('--env', `NODE_EXTRA_CA_CERTS=${BASE_CA_BUNDLE}`);
    }
    await run('buildah', ['config', ...config, c], options);
    await run('buildah', ['commit', '--rm', c, LOCAL_BASE_IMAGE], options);
    container = undefined;
    return true;
  } finally {
    if (container !== undefined) await run('buildah', ['rm', container]).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
}

export interface BuildOptions extends RunOptions {
  /** The image's name; LOCAL_IMAGE by default. */
  tag?: string;
}

/** Builds the repository's Dockerfile on LOCAL_BASE_IMAGE (made first if missing); resolves the image's name. */
export async function buildImage(options: BuildOptions = {}): Promise<string> {
  await ensureLocalBase(options);
  const tag = options.tag ?? LOCAL_IMAGE;
  const previous = (await run('buildah', ['images', '--quiet', '--noheading', '--filter', `reference=${tag}`])).trim();
  await run(
    'buildah',
    [
      'bud',
      '--pull=never',
      '--isolation',
      'chroot',
      '--build-arg',
      `BASE_IMAGE=${LOCAL_BASE_IMAGE}`,
      '-t',
      tag,
      '-f',
      join(REPO_ROOT, 'Dockerfile'),
      REPO_ROOT,
    ],
    options,
  );
  // The image this tag named before is left without a name: remove it, or every build would keep one.
  const current = (await run('buildah', ['images', '--quiet', '--noheading', '--filter', `reference=${tag}`])).trim();
  if (previous !== '' && previous !== current) await run('buildah', ['rmi', previous]).catch(() => undefined);
  return tag;
}

/**
 * Writes `image` to `path` as an OCI archive whose index names it in full
 * (org.opencontainers.image.ref.name), for
 * `ctr -n k8s.io images import --base-name <name without tag> <path>`: ctr keeps a
 * full name under --base-name as it is, where a bare tag would get the prefix.
 */
export async function exportImage(image: string, path: string, options: RunOptions = {}): Promise<void> {
  requireTools();
  rmSync(path, { force: true });
  await run('buildah', ['push', image, `oci-archive:${path}:${image}`], options);
}
