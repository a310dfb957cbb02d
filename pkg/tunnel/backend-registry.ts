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

function hostKeys(b: Backend): string[] {
  return [...new Set([...b.identifiers.ipv4, ...b.identifiers.ipv6, ...b.identifiers.host])];
}

export class BackendRegistry {
  /** agentID → its streams, oldest first. */
  private readonly byAgent = new Map<string, Backend[]>();
  /** Advertised ipv4/ipv6/host value → streams, oldest first. */
  private readonly byHost = new Map<string, Backend[]>();
  /** agentID → its streams, for agents that advertise default-route. */
  private readonly defaultRoute = new Map<string, Backend[]>();

  add(b: Backend): void {
    addTo(this.byAgent, b.agentID, b);
    for (const key of hostKeys(b)) addTo(this.byHost, key, b);
    if (b.identifiers.defaultRoute) addTo(this.defaultRoute, b.agentID, b);
  }

  remove(b: Backend): boolean {
    const list = this.byAgent.get(b.agentID);
    if (list === undefined || !list.includes(b)) return false;
    removeFrom(this.byAgent, b.agentID, b);
    for (const key of hostKeys(b)) removeFrom(this.byHost, key, b);
    removeFrom(this.defaultRoute, b.agentID, b);
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
        return preferActive(this.byHost.get(host));
      case 'default':
        return pickRandomAgent(this.byAgent);
      case 'defaultRoute':
        return pickRandomAgent(this.defaultRoute);
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
    return [...this.byAgent.values()].flat();
  }

  streamsOf(agentID: string): readonly Backend[] {
    return this.byAgent.get(agentID) ?? [];
  }
}

/** A random agent's oldest stream, preferring agents that are neither draining nor suspended. */
function pickRandomAgent(byAgent: Map<string, Backend[]>): Backend | undefined {
  const agents = [...byAgent.values()];
  if (agents.length === 0) return undefined;
  const start = Math.floor(Math.random() * agents.length);
  let fallback: Backend | undefined;
  for (let i = 0; i < agents.length; i++) {
    const b = preferActive(agents[(start + i) % agents.length]);
    if (b === undefined) continue;
    if (!b.draining && !b.suspended) return b;
    fallback ??= b;
  }
  return fallback;
}
