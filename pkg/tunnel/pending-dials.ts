// Dials sent to an agent and not yet answered, keyed by dial ID (`random`).
// Every entry has a deadline, and `take` is the only way out: it clears the
// timer and the cancel listener, so whoever takes an entry settles it, once.

import type { Backend } from './backend.js';
import { InternalError } from '../protocol/errors.js';
import type { TunnelConn } from './tunnel-conn.js';
import type { TunnelRelay } from './tunnel-relay.js';

export interface PendingDial {
  random: bigint;
  backend: Backend;
  address: string;
  startedAt: number;
  /** The caller joins a socket to the connection (a TunnelRelay), or wants a Duplex (TunnelConn). */
  relay: boolean;
  resolve(conn: TunnelConn | TunnelRelay): void;
  reject(err: Error): void;
  timer?: NodeJS.Timeout;
  abortListener?: Disposable;
}

export class PendingDials {
  private readonly dials = new Map<bigint, PendingDial>();

  has(random: bigint): boolean {
    return this.dials.has(random);
  }

  get(random: bigint): PendingDial | undefined {
    return this.dials.get(random);
  }

  add(dial: PendingDial): void {
    if (this.dials.has(dial.random)) throw new InternalError(`dial ID ${dial.random} is already pending`);
    this.dials.set(dial.random, dial);
    dial.backend.pendingDialCount++;
  }

  take(random: bigint): PendingDial | undefined {
    const dial = this.dials.get(random);
    if (dial === undefined) return undefined;
    this.dials.delete(random);
    dial.backend.pendingDialCount--;
    if (dial.timer !== undefined) clearTimeout(dial.timer);
    dial.abortListener?.[Symbol.dispose]();
    return dial;
  }

  /** Takes every dial pending on `backend`. */
  takeAllFor(backend: Backend): PendingDial[] {
    if (backend.pendingDialCount === 0) return [];
    return [...this.dials.values()].filter((d) => d.backend === backend).map((d) => this.take(d.random)!);
  }

  /** Hands every dial pending on `from` to `to`, deadlines and cancellation unchanged; returns them. */
  moveAll(from: Backend, to: Backend): PendingDial[] {
    if (from.pendingDialCount === 0) return [];
    const moved = [...this.dials.values()].filter((d) => d.backend === from);
    for (const d of moved) {
      d.backend = to;
      from.pendingDialCount--;
      to.pendingDialCount++;
    }
    return moved;
  }

  takeAll(): PendingDial[] {
    return [...this.dials.values()].map((d) => this.take(d.random)!);
  }

  get size(): number {
    return this.dials.size;
  }
}
