// The kustomization of manifests/README.md's step 2, as a user writes it beside
// a checkout and as the tests and the local cluster write it: one route's
// overlay, the HA component when asked, and `images:` putting the image in
// place of the manifests' placeholder `yurt-tunnel`, by tag or pinned by digest.

import { mkdir, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';

export const ROUTES = ['egress-selector', 'iptables', 'dns'] as const;
export type Route = (typeof ROUTES)[number];

/** The image name every container of the manifests carries until `images:` replaces it. */
export const IMAGE_PLACEHOLDER = 'yurt-tunnel';

export interface DeployKustomizationOptions {
  /** The repository's manifests/ folder. */
  manifests: string;
  /** Where the kustomization is written (kustomize wants the paths in it relative). */
  dir: string;
  route: Route;
  /** components/ha: two server replicas, each on a node of its own. */
  ha?: boolean;
  /** `registry.example.com/yurt-tunnel:0.1.0`, `localhost/yurt-tunnel:dev`, or `<name>@sha256:<digest>`. */
  image: string;
}

/** `name[:tag]` or `name@sha256:…` as kustomize's `images:` entry for the placeholder. */
export function imageEntry(image: string): string[] {
  const at = image.indexOf('@');
  if (at >= 0) return [`- name: ${IMAGE_PLACEHOLDER}`, `  newName: ${image.slice(0, at)}`, `  digest: ${image.slice(at + 1)}`];
  // A colon after the last slash is the tag (a registry's port comes before it).
  const colon = image.lastIndexOf(':');
  const tagged = colon > image.lastIndexOf('/');
  return [`- name: ${IMAGE_PLACEHOLDER}`, `  newName: ${tagged ? image.slice(0, colon) : image}`, ...(tagged ? [`  newTag: "${image.slice(colon + 1)}"`] : [])];
}

export function deployKustomization(opts: DeployKustomizationOptions): string {
  const rel = (path: string): string => relative(opts.dir, join(opts.manifests, path));
  return [
    'apiVersion: kustomize.config.k8s.io/v1beta1',
    'kind: Kustomization',
    'resources:',
    `- ${rel(`overlays/${opts.route}`)}`,
    ...(opts.ha === true ? ['components:', `- ${rel('components/ha')}`] : []),
    'images:',
    ...imageEntry(opts.image),
    '',
  ].join('\n');
}

/** Writes `<dir>/kustomization.yaml` (making `dir`); returns `dir`, for `kubectl apply -k`. */
export async function writeDeployKustomization(opts: DeployKustomizationOptions): Promise<string> {
  await mkdir(opts.dir, { recursive: true });
  await writeFile(join(opts.dir, 'kustomization.yaml'), deployKustomization(opts));
  return opts.dir;
}
