// Who can be dialled: the connected agent streams, indexed for each proxy
// strategy. Strategies are tried in the configured order; the first that finds
// a backend wins. Within one, a draining backend is used only when no other
// matches, and of several streams from one agent the oldest serves.

import type { Backend } from './backend.js';

export const PROXY_STRATEGIES = ['destHost', 'default', 'defaultRoute'] as const;
export type ProxyStrategy = (typeof PROXY_STRATEGIES)[number];

export function parseProxyStrategies(text: string): ProxyStrategy[] {
  const names = text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (names.length === 0) throw new TypeError('--proxy-strategy needs at least one of: ' + PROXY_STRATEGIES.join(', '));
  for (const n of names) {
    if (!(PROXY_STRATEGIES as readonly string[]).includes(n)) {
      throw new TypeError(`unknown proxy strategy ${JSON.stringify(n)}; use a comma list of: ${PROXY_STRATEGIES.join(', ')}`);
    }
  }
  return [...new Set(names)] as ProxyStrategy[];
}

function addTo<K>(map: Map<K, Backend[]>, key: K, b: Backend): void {
  const list = map.get(key);
  if (list === undefined) map.set(key, [b]);
  else list.push(b);
}

function removeFrom<K>(map: Map<K, Backend[]>, key: K, b: Backend): void {
  const list = map.get(key);
  if (list === undefined) return;
  const i = list.indexOf(b);
  if (i >= 0) list.splice(i, 1);
  if (list.length === 0) map.delete(key);
}

/** The first backend neither draining nor suspended (its link dropped, it may resume), else the first not suspended, else the first. */
function preferActive(list: readonly Backend[] | undefined): Backend | undefined {
  if (list === undefined || list.length === 0) return undefined;
  return list.find((b) => !b.draining && !b.suspended) ?? list.find((b) => !b.suspended) ?? list[0];
}

/** What destHost matches a dial host against: host names (and IPv6 hex) compare without case, as DNS names do. */
function hostKeys(b: Backend): string[] {
  return [...new Set([...b.identifiers.ipv4, ...b.identifiers.ipv6, ...b.identifiers.host].map((k) => k.toLowerCase()))];
}

interface AgentEntry {
  readonly streams: Backend[];
  /** Where the entry sits in AgentTable.entries. */
  index: number;
}

/**
 * Agents' streams by agent ID, also kept in an array so that a random agent
 * is one index away: picking one neither copies nor walks the table, however
 * many agents are connected (a dial with 1,000 agents once copied them all).
 * Removal swaps the last entry into the gap, so the array's order is not the
 * order the agents came in.
 */
class AgentTable {
  private readonly byID = new Map<string, AgentEntry>();
  private readonly entries: AgentEntry[] = [];

  get size(): number {
    return this.entries.length;
  }

  get(agentID: string): readonly Backend[] | undefined {
    return this.byID.get(agentID)?.streams;
  }

  add(b: Backend): void {
    const entry = this.byID.get(b.agentID);
    if (entry !== undefined) {
      entry.streams.push(b);
      return;
    }
    const added = { streams: [b], index: this.entries.length };
    this.byID.set(b.agentID, added);
    this.entries.push(added);
  }

  remove(b: Backend): void {
    const entry = this.byID.get(b.agentID);
    if (entry === undefined) return;
    const i = entry.streams.indexOf(b);
    if (i < 0) return;
    entry.streams.splice(i, 1);
    if (entry.streams.length > 0) return;
    this.byID.delete(b.agentID);
    const last = this.entries.pop()!;
    if (last !== entry) {
      last.index = entry.index;
      this.entries[entry.index] = last;
    }
  }

  /** Every stream, agent by agent. */
  streams(): Backend[] {
    return this.entries.flatMap((e) => e.streams);
  }

  /** A random agent's oldest stream, preferring agents that are neither draining nor suspended. */
  pickRandom(): Backend | undefined {
    const n = this.entries.length;
    if (n === 0) return undefined;
    const start = Math.floor(Math.random() * n);
    let fallback: Backend | undefined;
    for (let i = 0; i < n; i++) {
      const b = preferActive(this.entries[(start + i) % n]!.streams);
      if (b === undefined) continue;
      if (!b.draining && !b.suspended) return b;
      fallback ??= b;
    }
    return fallback;
  }
}

export class BackendRegistry {
  /** agentID → its streams, oldest first. */
  private readonly byAgent = new AgentTable();
  /** Advertised ipv4/ipv6/host value → streams, oldest first. */
  private readonly byHost = new Map<string, Backend[]>();
  /** agentID → its streams, for agents that advertise default-route. */
  private readonly defaultRoute = new AgentTable();

  add(b: Backend): void {
    this.byAgent.add(b);
    for (const key of hostKeys(b)) addTo(this.byHost, key, b);
    if (b.identifiers.defaultRoute) this.defaultRoute.add(b);
  }

  remove(b: Backend): boolean {
    const list = this.byAgent.get(b.agentID);
    if (list === undefined || !list.includes(b)) return false;
    this.byAgent.remove(b);
    for (const key of hostKeys(b)) removeFrom(this.byHost, key, b);
    this.defaultRoute.remove(b);
    return true;
  }

  /**
   * Picks a backend for `host` (a dial host without port, or the value of
   * X-Tunnel-Proxy-Host without port) by trying each strategy in order.
   */
  pick(strategies: readonly ProxyStrategy[], host: string): Backend | undefined {
    for (const s of strategies) {
      const b = this.pickWith(s, host);
      if (b !== undefined) return b;
    }
    return undefined;
  }

  private pickWith(strategy: ProxyStrategy, host: string): Backend | undefined {
    switch (strategy) {
      case 'destHost':
        return preferActive(this.byHost.get(host.toLowerCase()));
      case 'default':
        return this.byAgent.pickRandom();
      case 'defaultRoute':
        return this.defaultRoute.pickRandom();
    }
  }

  /** True if the first strategy can serve anything at all (readiness, as upstream). */
  readyFor(strategy: ProxyStrategy): boolean {
    switch (strategy) {
      case 'destHost':
        return this.byHost.size > 0;
      case 'default':
        return this.byAgent.size > 0;
      case 'defaultRoute':
        return this.defaultRoute.size > 0;
    }
  }

  get agentCount(): number {
    return this.byAgent.size;
  }

  all(): Backend[] {
    return this.byAgent.streams();
  }

  streamsOf(agentID: string): readonly Backend[] {
    return this.byAgent.get(agentID) ?? [];
  }
}
