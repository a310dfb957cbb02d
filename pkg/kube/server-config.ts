// The server's ConfigMap `kube-system/yurt-tunnel-server-cfg` (spec/yurttunnel.md §5),
// parsed into typed values: which extra ports are sent to which master port
// (iptables DNAT, the internal Service's `dnat-<port>` ports, the TLS of the
// far end), which ports are served on the edge node's loopback, and which
// destination ports the HTTP proxy port (--http-proxy-port) lets callers
// reach. A bad entry is skipped with a problem naming its key and value; the
// rest applies.

export const SERVER_CONFIGMAP = 'yurt-tunnel-server-cfg';
export const DNAT_PORTS_PAIR_KEY = 'dnat-ports-pair';
export const HTTP_PROXY_PORTS_KEY = 'http-proxy-ports';
export const HTTPS_PROXY_PORTS_KEY = 'https-proxy-ports';
export const LOCALHOST_PROXY_PORTS_KEY = 'localhost-proxy-ports';
/** Not OpenYurt's http-proxy-ports (ports sent to the HTTP master port): the allow-list of our HTTP proxy port. */
export const HTTP_PROXY_ALLOWED_PORTS_KEY = 'http-proxy-allowed-ports';

/** --http-proxy-allowed-ports' default: the kubelet's ports and node_exporter's. */
export const DEFAULT_HTTP_PROXY_ALLOWED_PORTS: readonly number[] = [9100, 10250, 10255];

/** The kubelet's ports: always sent to the tunnel, whatever the ConfigMap says. */
export const KUBELET_SECURE_PORT = 10250;
export const KUBELET_READ_ONLY_PORT = 10255;

/** The master port a proxied port lands on: `secure` (HTTPS, --secure-port) or `insecure` (HTTP, --insecure-port). */
export type MasterPort = 'secure' | 'insecure';

export interface ServerConfig {
  /** Ports sent to a master port besides 10250 and 10255, by port. */
  readonly proxyPorts: ReadonlyMap<number, MasterPort>;
  /** Ports served on the edge node's loopback. */
  readonly localhostProxyPorts: ReadonlySet<number>;
  /** Destination ports the HTTP proxy port lets callers reach. */
  readonly httpProxyAllowedPorts: ReadonlySet<number>;
}

export interface ServerConfigDefaults {
  /** --insecure-port: the only right side `dnat-ports-pair` honours. */
  insecurePort: number;
  /** Used while the ConfigMap (or its key) is absent: --localhost-proxy-ports. */
  localhostProxyPorts: readonly number[];
  /** Used while the ConfigMap (or its key) is absent: --http-proxy-allowed-ports; default DEFAULT_HTTP_PROXY_ALLOWED_PORTS. */
  httpProxyAllowedPorts?: readonly number[];
}

export interface ParsedServerConfig {
  config: ServerConfig;
  /** One line per skipped entry, naming the key and the value. */
  problems: string[];
}

/** The configuration without a ConfigMap. */
export function defaultServerConfig(defaults: ServerConfigDefaults): ServerConfig {
  return {
    proxyPorts: new Map(),
    localhostProxyPorts: new Set(defaults.localhostProxyPorts),
    httpProxyAllowedPorts: new Set(defaults.httpProxyAllowedPorts ?? DEFAULT_HTTP_PROXY_ALLOWED_PORTS),
  };
}

/** Every port sent to a master port: 10250 → secure, 10255 → insecure, then the ConfigMap's, in port order. */
export function masterPortMappings(config: ServerConfig): Map<number, MasterPort> {
  const all = new Map<number, MasterPort>([[KUBELET_SECURE_PORT, 'secure'], [KUBELET_READ_ONLY_PORT, 'insecure'], ...config.proxyPorts]);
  return new Map([...all].sort(([a], [b]) => a - b));
}

function entries(value: string): string[] {
  return value
    .split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '');
}

function port(text: string): number | undefined {
  if (!/^\d{1,5}$/.test(text)) return undefined;
  const n = Number(text);
  return n >= 1 && n <= 65535 ? n : undefined;
}

function notAPort(key: string, entry: string): string {
  return `${key}: ${JSON.stringify(entry)} is not a port (1-65535); skipped`;
}

export function parseServerConfig(data: Readonly<Record<string, string>> | undefined, defaults: ServerConfigDefaults): ParsedServerConfig {
  const problems: string[] = [];
  const proxyPorts = new Map<number, MasterPort>();
  const from = new Map<number, string>();

  const add = (key: string, entry: string, p: number, to: MasterPort): void => {
    if (p === KUBELET_SECURE_PORT || p === KUBELET_READ_ONLY_PORT) {
      const fixed = p === KUBELET_SECURE_PORT ? 'secure' : 'insecure';
      problems.push(`${key}: ${JSON.stringify(entry)}: port ${p} is the kubelet's and always goes to the ${fixed} master port; skipped`);
      return;
    }
    const earlier = proxyPorts.get(p);
    if (earlier !== undefined && earlier !== to) {
      // As OpenYurt: https-proxy-ports is read last and wins.
      problems.push(`${key}: ${JSON.stringify(entry)}: port ${p} is also in ${from.get(p)}; it goes to the ${to} master port`);
    }
    proxyPorts.set(p, to);
    from.set(p, key);
  };

  const pairs = data?.[DNAT_PORTS_PAIR_KEY];
  if (pairs !== undefined) {
    // Deprecated: "P=10264,Q=10264". Once any `=` appears every entry is a pair,
    // and only pairs to the insecure port are kept (they map to the HTTP master port).
    const pairMode = pairs.includes('=');
    for (const entry of entries(pairs)) {
      if (!pairMode) {
        const p = port(entry);
        if (p === undefined) problems.push(notAPort(DNAT_PORTS_PAIR_KEY, entry));
        else add(DNAT_PORTS_PAIR_KEY, entry, p, 'insecure');
        continue;
      }
      const sides = entry.split('=').map((s) => s.trim());
      const [left, right] = sides;
      const p = sides.length === 2 ? port(left!) : undefined;
      if (p === undefined || sides.length !== 2) {
        problems.push(`${DNAT_PORTS_PAIR_KEY}: ${JSON.stringify(entry)} is not <port>=${defaults.insecurePort}; skipped`);
      } else if (port(right!) !== defaults.insecurePort) {
        problems.push(
          `${DNAT_PORTS_PAIR_KEY}: ${JSON.stringify(entry)}: only pairs to the insecure port ${defaults.insecurePort} are honoured; use ${HTTPS_PROXY_PORTS_KEY} for the secure one; skipped`,
        );
      } else {
        add(DNAT_PORTS_PAIR_KEY, entry, p, 'insecure');
      }
    }
  }

  for (const [key, to] of [
    [HTTP_PROXY_PORTS_KEY, 'insecure'],
    [HTTPS_PROXY_PORTS_KEY, 'secure'],
  ] as const) {
    for (const entry of entries(data?.[key] ?? '')) {
      const p = port(entry);
      if (p === undefined) problems.push(notAPort(key, entry));
      else add(key, entry, p, to);
    }
  }

  /** A key's port list, or `fallback` while the key is absent; sorted. */
  const portSet = (key: string, fallback: readonly number[]): Set<number> => {
    const value = data?.[key];
    if (value === undefined) return new Set([...fallback].sort((a, b) => a - b));
    const ports = new Set<number>();
    for (const entry of entries(value)) {
      const p = port(entry);
      if (p === undefined) problems.push(notAPort(key, entry));
      else ports.add(p);
    }
    return new Set([...ports].sort((a, b) => a - b));
  };
  const localhostProxyPorts = portSet(LOCALHOST_PROXY_PORTS_KEY, defaults.localhostProxyPorts);
  const httpProxyAllowedPorts = portSet(HTTP_PROXY_ALLOWED_PORTS_KEY, defaults.httpProxyAllowedPorts ?? DEFAULT_HTTP_PROXY_ALLOWED_PORTS);

  const sortedPorts = new Map([...proxyPorts].sort(([a], [b]) => a - b));
  return { config: { proxyPorts: sortedPorts, localhostProxyPorts, httpProxyAllowedPorts }, problems };
}

export function sameServerConfig(a: ServerConfig, b: ServerConfig): boolean {
  return describeServerConfig(a) === describeServerConfig(b);
}

/** One line for logs: `http=8080,9100 https=9443 localhost=10266,10267 proxy-allowed=9100,10250,10255`. */
export function describeServerConfig(config: ServerConfig): string {
  const of = (to: MasterPort): string =>
    [...config.proxyPorts]
      .filter(([, m]) => m === to)
      .map(([p]) => p)
      .join(',');
  return (
    `http=${of('insecure')} https=${of('secure')} localhost=${[...config.localhostProxyPorts].join(',')} ` +
    `proxy-allowed=${[...config.httpProxyAllowedPorts].join(',')}`
  );
}
