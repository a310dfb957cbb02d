// The TCP listeners of this process, and whether a host:port a tunnel dial
// names would reach one of them: then the agent's connection comes back into
// this server (issue 35: a master-port request for 127.0.0.1:10263 looped
// through its own tunnel until the server held gigabytes).
//
// What a host means depends on where the agent runs. A loopback address,
// 0.0.0.0, :: or a localhost name is the agent's own machine: this one only
// for an agent connected from an address of this machine. An address of one
// of this machine's interfaces, or its host name, is this machine for every
// agent that can route to it.

import { BlockList, isIP, type AddressInfo } from 'node:net';
import { hostname, networkInterfaces } from 'node:os';

/** A listener of ours that a dial would reach: its name and where it listens. */
export interface OwnListener {
  name: string;
  /** host:port as bound (IPv6 in brackets). */
  address: string;
}

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

/** Names every resolver maps to the loopback (RFC 6761 reserves *.localhost). */
const LOCALHOST_NAMES = new Set(['localhost', 'localhost.localdomain', 'ip6-localhost', 'ip6-loopback']);

/** A host as compared here: no brackets, no zone, lower case, IPv4-mapped IPv6 as IPv4. */
function normalHost(host: string): string {
  const h = host
    .replace(/^\[|\]$/g, '')
    .replace(/%.*$/, '')
    .toLowerCase();
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(h);
  return mapped !== null ? mapped[1]! : h;
}

function isWildcard(host: string): boolean {
  return host === '0.0.0.0' || host === '::';
}

/** Whether `host` (normalised) names the dialler's own machine, whichever it is. */
export function isLoopbackHost(host: string): boolean {
  const family = isIP(host);
  if (family === 0) return LOCALHOST_NAMES.has(host) || host.endsWith('.localhost');
  return isWildcard(host) || LOOPBACK.check(host, family === 4 ? 'ipv4' : 'ipv6');
}

/** The addresses of this machine's interfaces (normalised), loopback included. */
function machineAddresses(): Set<string> {
  const out = new Set<string>();
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) out.add(normalHost(a.address));
  }
  return out;
}

/** Whether `host` (an agent's remote address, without port) is this machine. */
export function isThisMachine(host: string): boolean {
  const h = normalHost(host);
  return isLoopbackHost(h) || machineAddresses().has(h);
}

export class OwnListeners {
  private readonly listeners: Array<{ name: string; addresses: () => readonly AddressInfo[] }> = [];

  /** `address` is read at each check (null until it listens): a listener on port 0 is known once it listens. */
  add(name: string, address: () => AddressInfo | null): void {
    this.listeners.push({
      name,
      addresses: () => {
        const a = address();
        return a === null ? [] : [a];
      },
    });
  }

  /** A set of listeners that comes and goes (the mapped TCP ports), read at each check. */
  addEach(name: string, addresses: () => readonly AddressInfo[]): void {
    this.listeners.push({ name, addresses });
  }

  /**
   * The listener a connection to `host`:`port` would reach, made by an agent
   * on this machine (`agentHere()`, asked only for a loopback host) or
   * elsewhere; undefined when none would.
   * Names other than localhost ones and this host's are not resolved: the
   * agent's resolver, not ours, would answer for them.
   */
  reached(host: string, port: number, agentHere: () => boolean): OwnListener | undefined {
    const bound = this.listeners.flatMap((l) => l.addresses().flatMap((a) => (a.port === port ? [{ name: l.name, a }] : [])));
    // Most dials name no port of ours: the interfaces are read only when one does.
    if (bound.length === 0) return undefined;
    const h = normalHost(host);
    const loopback = isLoopbackHost(h);
    if (loopback && !agentHere()) return undefined;
    const local = loopback || h === hostname().toLowerCase() || machineAddresses().has(h);
    for (const { name, a } of bound) {
      const at = normalHost(a.address);
      if (reaches(h, at, local)) return { name, address: isIP(at) === 6 ? `[${at}]:${a.port}` : `${at}:${a.port}` };
    }
    return undefined;
  }
}

/** Whether a connection to `host` (normalised; `local`: an address of this machine) reaches a listener bound to `at`. */
function reaches(host: string, at: string, local: boolean): boolean {
  // 0.0.0.0 takes IPv4 only; :: takes both (Node listens dual-stack).
  if (at === '0.0.0.0') return local && isIP(host) !== 6;
  if (at === '::') return local;
  if (host === at) return true;
  // A localhost name, 0.0.0.0 or :: reach a listener on the loopback.
  return isLoopbackHost(at) && (isIP(host) === 0 ? isLoopbackHost(host) : isWildcard(host));
}
