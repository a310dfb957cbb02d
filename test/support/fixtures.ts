// The recorded kube-apiserver exchanges the tests replay, kept in the
// repository under test/fixtures/ (its README says how they were made).

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from './upstream.js';

/** The entries of test/fixtures/kube-apiserver/<name>.json; throws if the file is missing or has none. */
export function kubeAPIServerFixture<T>(name: 'egress-grpc' | 'egress-httpconnect' | 'kubelet-requests' | 'rest'): T[] {
  const path = join(repoRoot(), 'test', 'fixtures', 'kube-apiserver', `${name}.json`);
  const entries = (JSON.parse(readFileSync(path, 'utf8')) as { entries?: unknown }).entries;
  if (!Array.isArray(entries) || entries.length === 0) throw new Error(`fixture file ${path} has no entries`);
  return entries as T[];
}
