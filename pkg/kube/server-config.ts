// The server's ConfigMap `kube-system/yurt-tunnel-server-cfg` (spec/yurttunnel.md §5),
// parsed into typed values: which extra ports are sent to which master port
// (iptables DNAT, the internal Service's `dnat-<port>` ports, the TLS of the
// far end), which ports are served on the edge node's loopback, and which
// destination ports the HTTP proxy port (--http-proxy-port) lets callers
// reach, and which server ports are mapped to an address on a node
// (tcp-proxy-ports, SuperEdge's TCP module). A bad entry is skipped with a problem naming its key and value; the
// rest applies.

export const SERVER_CONFIGMAP = 'yurt-tunnel-server-cfg';
export const DNAT_PORTS_PAIR_KEY = 'dnat-ports-pair';
export const HTTP_PROXY_PORTS_KEY = 'http-proxy-ports';
export const HTTPS_PROXY_PORTS_KEY = 'https-proxy-ports';
export const LOCALHOST_PROXY_PORTS_KEY = 'localhost-proxy-ports';
/** Not OpenYurt's http-proxy-ports (ports sent to the HTTP master port): the allow-list of our HTTP proxy port. */
export const HTTP_PROXY_ALLOWED_PORTS_KEY = 'http-proxy-allowed-ports';

/**
 * Server ports mapped to an address on a node, through its agent:
 * `[<listen-ip>:]<port>=<node>/<host>:<port>, …`, e.g. `16443=edge-1/127.0.0.1:6443`.
 * Without a listen IP the port listens where the insecure master port does
 * (loopback unless --insecure-bind-address says otherwise): a mapped port has
 * no authentication of its own, so reaching it from elsewhere is the
 * operator's explicit choice (`0.0.0.0:16443=…`).
 */
export const TCP_PROXY_PORTS_KEY = 'tcp-proxy-ports';

/** One tcp-proxy-ports entry. */
export interface TcpPortMapping {
  /** The listen IP as written, or undefined for the insecure bind address. */
  readonly listenHost: string | undefined;
  readonly port: number;
  /** The node whose agent dials. */
  readonly node: string;
  /** host:port the agent dials. */
  readonly address: string;
}

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
  /** tcp-proxy-ports, by listening port. */
  readonly tcpProxyPorts: ReadonlyMap<number, TcpPortMapping>;
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
    tcpProxyPorts: new Map(),
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

/** A key's port list, or `fallback` while the key is absent; sorted. A bad entry is a problem. */
function portSet(data: Readonly<Record<string, string>> | undefined, key: string, fallback: readonly number[], problems: string[]): Set<number> {
  const value = data?.[key];
  if (value === undefined) return new Set([...fallback].sort((a, b) => a - b));
  const ports = new Set<number>();
  for (const entry of entries(value)) {
    const p = port(entry);
    if (p === undefined) problems.push(notAPort(key, entry));
    else ports.add(p);
  }
  return new Set([...ports].sort((a, b) => a - b));
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

  const localhostProxyPorts = portSet(data, LOCALHOST_PROXY_PORTS_KEY, defaults.localhostProxyPorts, problems);
  const httpProxyAllowedPorts = portSet(data, HTTP_PROXY_ALLOWED_PORTS_KEY, defaults.httpProxyAllowedPorts ?? DEFAULT_HTTP_PROXY_ALLOWED_PORTS, problems);

  const tcpProxyPorts = parseTcpProxyPorts(data?.[TCP_PROXY_PORTS_KEY] ?? '', problems);

  const sortedPorts = new Map([...proxyPorts].sort(([a], [b]) => a - b));
  return {
    config: { proxyPorts: sortedPorts, localhostProxyPorts, httpProxyAllowedPorts, tcpProxyPorts },
    problems,
  };
}

const IPV4 = /^\d{1,3}(?:\.\d{1,3}){3}$/;
// A node name as Kubernetes allows it (a DNS subdomain), lower case.
const NODE_NAME = /^[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?$/;

/** host:port with an IPv6 host in brackets; the host a name or an IP. */
function hostPort(text: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+)):(\d{1,5})$/.exec(text);
  const p = m === null ? undefined : port(m[3]!);
  return p === undefined ? undefined : { host: m![1] ?? m![2]!, port: p };
}

/** One tcp-proxy-ports entry, or why it is not one (to follow the quoted entry). */
function parseTcpPortMapping(entry: string): TcpPortMapping | string {
  const eq = entry.indexOf('=');
  const slash = entry.indexOf('/', eq);
  if (eq < 0 || slash < 0) return ' is not [<listen-ip>:]<port>=<node>/<host>:<port>';
  const left = entry.slice(0, eq).trim();
  const node = entry.slice(eq + 1, slash).trim();
  const target = entry.slice(slash + 1).trim();
  let listenHost: string | undefined;
  let listenPort = port(left);
  if (listenPort === undefined) {
    const hp = hostPort(left);
    if (hp === undefined || (!IPV4.test(hp.host) && !hp.host.includes(':'))) return `: ${JSON.stringify(left)} is not <port> or <listen-ip>:<port>`;
    listenHost = hp.host;
    listenPort = hp.port;
  }
  if (!NODE_NAME.test(node)) return `: ${JSON.stringify(node)} is not a node name`;
  const to = hostPort(target);
  if (to === undefined) return `: ${JSON.stringify(target)} is not <host>:<port>`;
  return { listenHost, port: listenPort, node, address: to.host.includes(':') ? `[${to.host}]:${to.port}` : `${to.host}:${to.port}` };
}

/** tcp-proxy-ports' entries by port, in port order; a bad or repeated entry is a problem. */
function parseTcpProxyPorts(value: string, problems: string[]): Map<number, TcpPortMapping> {
  const mappings = new Map<number, TcpPortMapping>();
  for (const entry of entries(value)) {
    const mapping = parseTcpPortMapping(entry);
    if (typeof mapping === 'string') problems.push(`${TCP_PROXY_PORTS_KEY}: ${JSON.stringify(entry)}${mapping}; skipped`);
    else if (mappings.has(mapping.port)) problems.push(`${TCP_PROXY_PORTS_KEY}: ${JSON.stringify(entry)}: port ${mapping.port} is mapped already; skipped`);
    else mappings.set(mapping.port, mapping);
  }
  return new Map([...mappings].sort(([a], [b]) => a - b));
}

/** How a mapping is written back: `16443=edge-1/127.0.0.1:6443`. */
export function describeTcpPortMapping(m: TcpPortMapping): string {
  const listen = m.listenHost === undefined ? `${m.port}` : m.listenHost.includes(':') ? `[${m.listenHost}]:${m.port}` : `${m.listenHost}:${m.port}`;
  return `${listen}=${m.node}/${m.address}`;
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
    `proxy-allowed=${[...config.httpProxyAllowedPorts].join(',')}` +
    (config.tcpProxyPorts.size === 0 ? '' : ` tcp=${[...config.tcpProxyPorts.values()].map(describeTcpPortMapping).join(',')}`)
  );
}
