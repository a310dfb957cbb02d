// ServerOptions for in-process servers in tests: every port chosen by the
// system, sockets in the test's folder, short timeouts.

import { join } from 'node:path';
import type { ServerOptions } from '../../pkg/server/options.js';
import { MemoryLogger } from './memory-logger.js';

export function testServerOptions(dir: string, extra: Partial<ServerOptions> = {}): ServerOptions {
  return {
    bindAddress: '127.0.0.1',
    tunnelAgentConnectPort: 0,
    securePort: 0,
    insecurePort: 0,
    localhostProxyPorts: [],
    interceptorProxierUDS: join(dir, 'proxier.sock'),
    proxyStrategies: ['destHost'],
    dialTimeoutMs: 3000,
    serverCount: 1,
    certDir: join(dir, 'server-pki'),
    certIPs: [],
    certDNSNames: [],
    enableIptables: false,
    enableDNSController: false,
    keepaliveTimeMs: 10_000,
    keepaliveTimeoutMs: 20_000,
    logger: new MemoryLogger(),
    ...extra,
  };
}
