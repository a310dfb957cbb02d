// NO_PROXY: which servers the agent dials directly although a proxy is set,
// read as Go's net/http/httpproxy reads it (curl agrees on these forms):
// comma-separated entries, `*` for every host, an IP or a CIDR, a domain that
// matches itself and its subdomains (`example.com`), a leading dot or `*.`
// for subdomains only (`.example.com`), and an optional `:port` on IPs and
// domains. Names are compared as written, never resolved. Unlike Go, loopback
// is not exempt by itself: list it when it should be.

import { BlockList, isIP } from 'node:net';

interface DomainEntry {
  /** Lower case, without the leading dot. */
  name: string;
  subdomainsOnly: boolean;
  port: number | undefined;
}

export class NoProxy {
  private readonly all: boolean;
  private readonly cidrs = new BlockList();
  private readonly ips: { ip: string; port: number | undefined }[] = [];
  private readonly domains: DomainEntry[] = [];

  /** `text` as in NO_PROXY; an entry that is none of the forms above is ignored, as Go and curl do. */
  constructor(readonly text: string) {
    const entries = text
      .split(',')
      .map((e) => e.trim().toLowerCase())
      .filter((e) => e !== '');
    this.all = entries.includes('*');
    for (const entry of entries) this.add(entry);
  }

  /** True when `host` (a name or an IP, without brackets) on `port` is to be dialled directly. */
  bypasses(host: string, port: number): boolean {
    if (this.all) return true;
    const h = host.toLowerCase().replace(/\.$/, '');
    const family = isIP(h);
    if (family !== 0) {
      if (this.cidrs.check(h, family === 6 ? 'ipv6' : 'ipv4')) return true;
      return this.ips.some((e) => e.ip === h && (e.port === undefined || e.port === port));
    }
    return this.domains.some((d) => (d.port === undefined || d.port === port) && (h.endsWith(`.${d.name}`) || (!d.subdomainsOnly && h === d.name)));
  }

  private add(entry: string): void {
    const slash = entry.indexOf('/');
    if (slash > 0) {
      const ip = entry.slice(0, slash);
      const prefix = Number(entry.slice(slash + 1));
      const family = isIP(ip);
      if (family !== 0 && Number.isInteger(prefix) && prefix >= 0 && prefix <= (family === 6 ? 128 : 32)) {
        this.cidrs.addSubnet(ip, prefix, family === 6 ? 'ipv6' : 'ipv4');
      }
      return;
    }
    const m = /^(?:\[([^\]]+)\]|([^:]+))(?::(\d{1,5}))?$/.exec(entry) ?? /^()([^[\]]+)$/.exec(entry);
    if (m === null) return;
    const host = m[1] || m[2]!;
    const port = m[3] !== undefined ? Number(m[3]) : undefined;
    if (isIP(host) !== 0) {
      this.ips.push({ ip: host, port });
      return;
    }
    const subdomainsOnly = host.startsWith('.') || host.startsWith('*.');
    const name = host.replace(/^\*?\./, '').replace(/\.$/, '');
    if (name !== '') this.domains.push({ name, subdomainsOnly, port });
  }
}
