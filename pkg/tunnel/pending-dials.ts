// Dials sent to an agent and not yet answered, keyed by dial ID (`random`).
// Every entry has a deadline, and `take` is the only way out: it clears the
// timer and the cancel listener, so whoever takes an entry settles it, once.

import type { Backend } from './backend.js';
import type { Cancel } from '../mux/cancel.js';
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
  cancel?: Cancel;
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
    dial.backend.pendingDials.add(dial.random);
  }

  take(random: bigint): PendingDial | undefined {
    const dial = this.dials.get(random);
    if (dial === undefined) return undefined;
    this.dials.delete(random);
    dial.backend.pendingDials.delete(random);
    if (dial.timer !== undefined) clearTimeout(dial.timer);
    dial.abortListener?.[Symbol.dispose]();
    dial.cancel?.clear();
    return dial;
  }

  /** Takes every dial pending on `backend`. */
  takeAllFor(backend: Backend): PendingDial[] {
    return [...backend.pendingDials].map((r) => this.take(r)).filter((d): d is PendingDial => d !== undefined);
  }

  takeAll(): PendingDial[] {
    return [...this.dials.keys()].map((r) => this.take(r)!);
  }

  get size(): number {
    return this.dials.size;
  }
}
