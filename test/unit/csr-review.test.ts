// The serving CSR's names against what our server names (csr-review.ts), on
// the pure review: the server's own names pass whatever order and textual
// form of the addresses, one more name is refused with it named, and only the
// serving CSR asks for the server's names.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1CertificateSigningRequest } from '@kubernetes/client-node';
import { CLIENT_USAGES, KUBE_APISERVER_CLIENT_SIGNER, KUBELET_SERVING_SIGNER, SERVING_USAGES } from '../../pkg/certs/certificate-manager.js';
import { PROXY_CLIENT_COMMON_NAME, SERVER_COMMON_NAME, SERVER_ORGANIZATION, YURTTUNNEL_ORGANIZATION } from '../../pkg/certs/local-store.js';
import { createSigningRequest } from '../../pkg/certs/pki.js';
import { reviewTunnelCsr, type AllowedNames, type CsrReviewContext } from '../../pkg/kube/csr-review.js';

const SERVER_USER = 'system:serviceaccount:kube-system:yurt-tunnel-server';

function servingCsr(dnsNames: string[], ips: string[]): V1CertificateSigningRequest {
  const { csr } = createSigningRequest({ commonName: SERVER_COMMON_NAME, organizations: [SERVER_ORGANIZATION], dnsNames, ips });
  return {
    metadata: { name: 'yurttunnel-server-abcde' },
    spec: { request: Buffer.from(csr).toString('base64'), signerName: KUBELET_SERVING_SIGNER, usages: [...SERVING_USAGES], username: SERVER_USER },
  };
}

function context(own: AllowedNames): CsrReviewContext & { asked: number } {
  const ctx = {
    asked: 0,
    serverUser: SERVER_USER,
    readNode: () => Promise.resolve(undefined),
    servingNames: () => {
      ctx.asked++;
      return Promise.resolve(own);
    },
  };
  return ctx;
}

const OWN: AllowedNames = {
  ips: ['10.0.0.10', 'FD00:0:0:0:0:0:0:A', '127.0.0.1', '::1'],
  dnsNames: ['cloud-1', 'x-tunnel-server-svc', 'x-tunnel-server-svc.kube-system.svc'],
};

test("a serving CSR naming a subset of the server's names, in any order and IPv6 form, is approved", async () => {
  const review = await reviewTunnelCsr(servingCsr(['x-tunnel-server-svc.kube-system.svc', 'cloud-1'], ['fd00::a', '10.0.0.10']), context(OWN));
  assert.equal(review.verdict, 'approve');
});

test('a serving CSR naming one more name or address is refused, naming them', async () => {
  const review = await reviewTunnelCsr(servingCsr(['x-tunnel-server-svc', 'edge-1'], ['10.0.0.10', '192.168.1.5']), context(OWN));
  assert.ok(review.verdict === 'refuse');
  assert.match(review.reason, /^server serving CSR: names edge-1,192\.168\.1\.5, not among the server's own serving names \(/);
});

test("the proxy client's review does not ask for the serving names", async () => {
  const { csr } = createSigningRequest({ commonName: PROXY_CLIENT_COMMON_NAME, organizations: [YURTTUNNEL_ORGANIZATION], dnsNames: [], ips: [] });
  const ctx = context(OWN);
  const review = await reviewTunnelCsr(
    {
      metadata: { name: 'yurttunnel-server-proxy-client-abcde' },
      spec: { request: Buffer.from(csr).toString('base64'), signerName: KUBE_APISERVER_CLIENT_SIGNER, usages: [...CLIENT_USAGES], username: SERVER_USER },
    },
    ctx,
  );
  assert.equal(review.verdict, 'approve');
  assert.equal(ctx.asked, 0);
});
