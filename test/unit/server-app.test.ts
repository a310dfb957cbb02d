import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { TunnelServer } from '../../pkg/server/app.js';
import { loopbackFor, type ServerOptions } from '../../pkg/server/options.js';
import { serverKubeConfigSource } from '../../pkg/kube/client.js';
import { harness } from '../support/harness.js';
import { testServerOptions } from '../support/server-options.js';
import { testPKI } from '../support/pki.js';
import { tempDir } from '../support/tunnel.js';

test("the insecure master port defaults to the loopback of the bind address's family", () => {
  assert.equal(loopbackFor('0.0.0.0'), '127.0.0.1');
  assert.equal(loopbackFor('10.0.0.5'), '127.0.0.1');
  assert.equal(loopbackFor('::'), '::1');
  assert.equal(loopbackFor('fd00::5'), '::1');
});

test('a kubeconfig means a cluster; no kubeconfig and no pod environment means local mode', () => {
  assert.deepEqual(serverKubeConfigSource('/etc/kubernetes/admin.conf'), { kind: 'kubeconfig', path: '/etc/kubernetes/admin.conf' });
  const saved = process.env.KUBERNETES_SERVICE_HOST;
  delete process.env.KUBERNETES_SERVICE_HOST;
  try {
    assert.equal(serverKubeConfigSource(undefined), undefined);
    assert.equal(serverKubeConfigSource(''), undefined);
  } finally {
    if (saved !== undefined) process.env.KUBERNETES_SERVICE_HOST = saved;
  }
});

// ----- files named by flags are read and checked before anything is built

function localOptions(certDir: string, extra: Partial<ServerOptions>): ServerOptions {
  return testServerOptions(certDir, { certDir, dialTimeoutMs: 1000, ...extra });
}

test('a file that is not a certificate is refused naming its flag, before any certificate is made or port opened', async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const certDir = join(dir, 'pki');
  const bogus = join(dir, 'kubelet-ca.crt');
  await writeFile(bogus, 'not a certificate\n');
  await assert.rejects(TunnelServer.start(localOptions(certDir, { kubeletCAFile: bogus })), (err: Error) => {
    assert.match(err.message, new RegExp(`^--kubelet-ca-file: ${bogus} does not hold a PEM certificate: `));
    return true;
  });
  await assert.rejects(readdir(certDir), { code: 'ENOENT' });
});

test('a missing file, a key that is not a key and a key of another certificate are refused naming their flags', async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const certDir = join(dir, 'pki');
  const certFile = join(dir, 'proxy.crt');
  const keyFile = join(dir, 'proxy.key');
  await writeFile(certFile, testPKI().server.cert);
  await writeFile(keyFile, testPKI().server.cert);
  await assert.rejects(TunnelServer.start(localOptions(certDir, { clientCAFile: join(dir, 'absent.crt') })), {
    message: new RegExp(`^--client-ca-file: cannot read ${join(dir, 'absent.crt')}: `),
  });
  await assert.rejects(TunnelServer.start(localOptions(certDir, { proxyClientCertFile: certFile, proxyClientKeyFile: keyFile })), {
    message: new RegExp(`^--proxy-client-key-file: ${keyFile} does not hold a PEM key: `),
  });
  const otherKey = join(dir, 'other.key');
  await writeFile(otherKey, testPKI().ca.key);
  await assert.rejects(TunnelServer.start(localOptions(certDir, { proxyClientCertFile: certFile, proxyClientKeyFile: otherKey })), {
    name: 'ConfigError',
    code: 'YT_ERR_FILE_INVALID',
    message: new RegExp(`^--proxy-client-key-file: ${otherKey} is not the private key of ${certFile} \\(--proxy-client-cert-file, which holds a certificate `),
  });
  await assert.rejects(TunnelServer.start(localOptions(certDir, { proxyClientCertFile: certFile })), {
    name: 'TypeError',
    message: '--proxy-client-cert-file and --proxy-client-key-file go together',
  });
  await assert.rejects(readdir(certDir), { code: 'ENOENT' });
});

test("the egress selector socket must not be the proxier's", async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  await assert.rejects(
    TunnelServer.start(localOptions(dir, { egressSelector: { uds: join(dir, 'proxier.sock'), mode: 'grpc' } })),
    /--egress-selector-uds and --interceptor-proxier-uds are both .*; give each its own socket/,
  );
});
