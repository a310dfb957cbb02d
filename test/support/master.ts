// The master ports over a test server, stand-in kubelets, and a caller that
// behaves like kube-apiserver (its kubelet-client certificate, no SNI).

import type { IncomingHttpHeaders } from 'node:http';
import { Agent, request } from 'node:https';
import { KubeletConnector } from '../../pkg/interceptor/kubelet-connector.js';
import { MasterServer } from '../../pkg/interceptor/master-server.js';
import { localhostProxy } from '../../pkg/interceptor/middleware/localhost-proxy.js';
import { traceRequest } from '../../pkg/interceptor/middleware/trace-request.js';
import type { NodeResolver } from '../../pkg/nodes/node-resolver.js';
import type { RequestContext } from '../../pkg/interceptor/request-context.js';
import { AgentNodeResolver } from '../../pkg/server/agent-node-resolver.js';
import { RequestInterceptor } from '../../pkg/interceptor/request-interceptor.js';
import type { LoopGuard } from '../../pkg/frontend/loop-guard.js';
import type { Registry } from 'prom-client';
import type { CertKeyPair } from '../../pkg/certs/pki.js';
import type { Harness } from './harness.js';
import { testPKI } from './pki.js';
import { StandinKubelet, type StandinKubeletOptions } from './standin-kubelet/index.js';
import type { TestServer } from './tunnel.js';

let proxyClient: CertKeyPair | undefined;
let apiserverClient: CertKeyPair | undefined;

/** The identity the tunnel presents to kubelets. */
export function proxyClientCert(): CertKeyPair {
  proxyClient ??= testPKI().issue({ commonName: 'tunnel-proxy-client', organizations: ['openyurt:yurttunnel'], usages: ['clientAuth'] });
  return proxyClient;
}

/** kube-apiserver's kubelet-client identity, as in the fixtures. */
export function apiserverClientCert(): CertKeyPair {
  apiserverClient ??= testPKI().issue({ commonName: 'kube-apiserver-kubelet-client', organizations: ['system:masters'], usages: ['clientAuth'] });
  return apiserverClient;
}

export interface TestMaster {
  master: MasterServer;
  securePort: number;
  insecurePort: number;
  connector: KubeletConnector;
  interceptor: RequestInterceptor;
}

export async function startMaster(
  h: Harness,
  server: TestServer,
  opts: {
    localhostPorts?: number[];
    kubeletCA?: string;
    resolver?: NodeResolver;
    metricsRegistry?: Registry;
    tlsHandshakeTimeoutMs?: number;
    requestHeadTimeoutMs?: number;
    /** TLS to the kubelet from the plain port too (the stand-in kubelet speaks only TLS; the server's own routing never does this). */
    tlsToKubelet?: boolean;
    /** Counts the master's loop refusals. */
    loopGuard?: LoopGuard;
    maxAwaitingPerDestination?: number;
  } = {},
): Promise<TestMaster> {
  const pki = testPKI();
  const connector = new KubeletConnector({
    dial: (address, o) => server.tunnel.dial(address, o),
    tls: () => ({ ...proxyClientCert(), kubeletCA: opts.kubeletCA }),
    logger: server.log,
  });
  const resolver = opts.resolver ?? new AgentNodeResolver(server.tunnel.registry);
  const ports = new Set(opts.localhostPorts ?? []);
  const interceptor = new RequestInterceptor(connector, server.log, { loopGuard: opts.loopGuard, maxAwaitingPerDestination: opts.maxAwaitingPerDestination });
  const master = new MasterServer({
    secure: { host: '127.0.0.1', port: 0, cert: pki.server.cert, key: pki.server.key, clientCA: pki.ca.cert },
    insecure: { host: '127.0.0.1', port: 0 },
    middleware: [
      traceRequest(resolver, server.log),
      localhostProxy(() => ports, resolver),
      ...(opts.tlsToKubelet === true ? [(ctx: RequestContext): void => void (ctx.tls = true)] : []),
    ],
    interceptor,
    loopGuard: opts.loopGuard,
    tlsHandshakeTimeoutMs: opts.tlsHandshakeTimeoutMs,
    requestHeadTimeoutMs: opts.requestHeadTimeoutMs,
    logger: server.log,
    metricsRegistry: opts.metricsRegistry,
  });
  h.defer(async () => {
    await master.close();
    connector.destroy();
  });
  await master.start();
  return { master, securePort: master.address('secure').port, insecurePort: master.address('insecure').port, connector, interceptor };
}

/** A stand-in kubelet on 127.0.0.1 whose certificate names `nodeName` and 127.0.0.1. */
export async function startKubelet(h: Harness, nodeName = 'edge-1', extra: Partial<StandinKubeletOptions> = {}): Promise<StandinKubelet> {
  const pki = testPKI();
  const serving = pki.issue({ commonName: nodeName, dnsNames: [nodeName], ips: ['127.0.0.1'], usages: ['serverAuth'] });
  const kubelet = new StandinKubelet({ cert: serving.cert, key: serving.key, clientCA: pki.ca.cert, nodeName, ...extra });
  h.defer(() => kubelet.close());
  await kubelet.start();
  return kubelet;
}

export interface CallerResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** A request to the secure master port the way kube-apiserver makes it. */
export function callMaster(
  port: number,
  path: string,
  host: string,
  opts: { agent?: Agent; cert?: CertKeyPair | null; headers?: Record<string, string>; method?: string } = {},
): Promise<CallerResponse> {
  const pki = testPKI();
  const cert = opts.cert === undefined ? apiserverClientCert() : opts.cert;
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path,
        method: opts.method ?? 'GET',
        headers: { Host: host, ...opts.headers },
        ca: pki.ca.cert,
        ...(cert === null ? {} : { cert: cert.cert, key: cert.key }),
        servername: '',
        agent: opts.agent ?? false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}
