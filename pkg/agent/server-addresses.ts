// Which server address the agent dials next, when it is given several
// (--tunnelserver-addr a:10262,b:10262,c:10262: servers without a load
// balancer, Konnectivity #394). Addresses that hold no link come first, those
// a suspended session waits behind before them; among equals the turn goes
// round, from a random start so that agents spread over the servers. An
// address that failed waits out its own backoff while the others are tried.

import { splitHostPort } from '../net/host-port.js';
import { Backoff, type BackoffOptions } from '../timers/backoff.js';

/** Splits a comma list of host:port (trimmed, empties dropped); throws naming `flag` and the bad entry. */
export function parseServerAddresses(text: string, flag = '--tunnelserver-addr'): string[] {
  const list = text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (list.length === 0) throw new TypeError(`${flag} names no address (host:port, or a comma list of them)`);
  for (const address of list) {
    if (splitHostPort(address) === undefined) {
      throw new TypeError(`${flag}: ${JSON.stringify(address)} is not host:port with a port 1-65535, e.g. 10.0.0.1:10262, [fd00::1]:10262`);
    }
  }
  return [...new Set(list)];
}

interface AddressState {
  address: string;
  backoff: Backoff;
  /** Not dialled again before this time (ms since the epoch) after a failure. */
  notBefore: number;
}

export class ServerAddresses {
  private readonly states: AddressState[];
  /** Where the round starts next time. */
  private turn: number;

  constructor(addresses: readonly string[], backoff: BackoffOptions, random: () => number = Math.random) {
    this.states = addresses.map((address) => ({ address, backoff: new Backoff(backoff), notBefore: 0 }));
    this.turn = Math.floor(random() * this.states.length);
  }

  get size(): number {
    return this.states.length;
  }

  get list(): string[] {
    return this.states.map((s) => s.address);
  }

  /**
   * The address to dial next, and how long to wait first (0: dial now; the
   * turn then moves on). `linked` are the addresses links are held through;
   * `awaited` those a suspended session waits behind. The best kind of
   * address wins even when it must wait out its backoff: another dial to a
   * server already held would only be a duplicate.
   */
  next(linked: ReadonlySet<string>, awaited: ReadonlySet<string>, now = Date.now()): { address: string; waitMs: number } {
    const n = this.states.length;
    const rank = (s: AddressState): number => (awaited.has(s.address) ? 0 : linked.has(s.address) ? 2 : 1);
    let best: AddressState | undefined;
    for (let i = 0; i < n; i++) {
      const s = this.states[(this.turn + i) % n]!;
      if (best === undefined || rank(s) < rank(best) || (rank(s) === rank(best) && Math.max(s.notBefore, now) < Math.max(best.notBefore, now))) best = s;
    }
    const waitMs = Math.max(0, best!.notBefore - now);
    if (waitMs === 0) this.turn = (this.states.indexOf(best!) + 1) % n;
    return { address: best!.address, waitMs };
  }

  /** A dial to `address` failed: it waits out its next backoff step, or `retryMs` when given; returns the wait. */
  failed(address: string, retryMs?: number, now = Date.now()): number {
    const s = this.states.find((x) => x.address === address);
    if (s === undefined) return 0;
    const wait = retryMs ?? s.backoff.next();
    s.notBefore = now + wait;
    return wait;
  }

  /** A dial to `address` reached a server: its backoff starts over. */
  succeeded(address: string): void {
    const s = this.states.find((x) => x.address === address);
    if (s === undefined) return;
    s.backoff.reset();
    s.notBefore = 0;
  }
}
