// The agent's dial policy (`--allowed-destinations`): which addresses the
// server may ask it to connect to. Entries are `CIDR` (any port), `CIDR:port`
// or `[IPv6-CIDR]:port`; a bare IP means a single host; `*` allows everything,
// as upstream agents do.

import { BlockList, isIP } from 'node:net';

interface Rule {
  list: BlockList;
  /** undefined = any port */
  port: number | undefined;
}

/** Decisions an AllowList remembers (a dial's BlockList checks cost more than the rest of its checks); forgotten all at once beyond this. */
const REMEMBERED_DECISIONS = 1024;

export class AllowList {
  private readonly decisions = new Map<string, boolean>();

  private constructor(
    private readonly rules: readonly Rule[],
    readonly allowsEverything: boolean,
    /** The list as configured, for messages. */
    readonly description: string,
  ) {}

  static everything(): AllowList {
    return new AllowList([], true, '*');
  }

  /** Parses a comma list; throws a TypeError naming the bad entry. */
  static parse(text: string): AllowList {
    const entries = text
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s !== '');
    if (entries.length === 0) throw new TypeError('--allowed-destinations is empty; give CIDRs, CIDR:port entries or *');
    if (entries.includes('*')) return AllowList.everything();
    return new AllowList(entries.map(parseRule), false, entries.join(','));
  }

  /** Loopback and the node's own addresses, any port: what a kubelet tunnel needs. */
  static defaultFor(nodeIPs: readonly string[]): AllowList {
    const entries = ['127.0.0.0/8', '::1/128', ...nodeIPs.filter((ip) => isIP(ip) !== 0)];
    return AllowList.parse(entries.join(','));
  }

  /** Whether `ip` (an IP literal, already resolved) and `port` may be dialled. */
  allows(ip: string, port: number): boolean {
    if (this.allowsEverything) return true;
    const key = `${ip} ${port}`;
    const known = this.decisions.get(key);
    if (known !== undefined) return known;
    const allowed = this.check(ip, port);
    if (this.decisions.size >= REMEMBERED_DECISIONS) this.decisions.clear();
    this.decisions.set(key, allowed);
    return allowed;
  }

  private check(ip: string, port: number): boolean {
    const family = isIP(ip);
    if (family === 0) return false;
    const type = family === 6 ? 'ipv6' : 'ipv4';
    return this.rules.some((r) => (r.port === undefined || r.port === port) && r.list.check(ip, type));
  }
}

function parseRule(entry: string): Rule {
  const bad = (why: string): TypeError =>
    new TypeError(`--allowed-destinations entry ${JSON.stringify(entry)} ${why}; use CIDR, CIDR:port, [IPv6-CIDR]:port or *`);
  let cidr = entry;
  let port: number | undefined;
  const bracketed = /^\[([^\]]+)\](?::(\d+))?$/.exec(entry);
  if (bracketed !== null) {
    cidr = bracketed[1]!;
    if (bracketed[2] !== undefined) port = Number(bracketed[2]);
  } else if (entry.split(':').length === 2) {
    // IPv4 (or v4 CIDR) with a port; an unbracketed IPv6 has several colons.
    const [c, p] = entry.split(':') as [string, string];
    if (!/^\d+$/.test(p)) throw bad('has a port that is not a number');
    cidr = c;
    port = Number(p);
  }
  if (port !== undefined && (port < 1 || port > 65535)) throw bad('has a port out of range 1-65535');
  const parts = cidr.split('/');
  if (parts.length > 2) throw bad('has more than one prefix length');
  const [ip, prefixText] = parts as [string, string | undefined];
  const family = isIP(ip);
  if (family === 0) throw bad('is not an IP address or CIDR');
  const max = family === 6 ? 128 : 32;
  const prefix = prefixText === undefined ? max : Number(prefixText);
  if (!/^\d+$/.test(prefixText ?? String(max)) || prefix > max) throw bad(`has a prefix length outside 0-${max}`);
  const list = new BlockList();
  list.addSubnet(ip, prefix, family === 6 ? 'ipv6' : 'ipv4');
  return { list, port };
}
