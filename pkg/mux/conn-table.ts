// Connections by connectID on one packet stream. A connection that ended
// before the peer acknowledged it leaves a tombstone for a while, so DATA still
// in flight for it is dropped quietly instead of answered with a close.

import type { MuxConn } from './mux-conn.js';

/** How long packets for a connection we closed are silently dropped. */
export const TOMBSTONE_MS = 30_000;

export class ConnTable<C extends MuxConn> {
  private readonly conns = new Map<bigint, C>();
  private readonly tombstones = new Map<bigint, number>();

  add(conn: C): void {
    this.conns.set(conn.connectID, conn);
    this.tombstones.delete(conn.connectID);
  }

  /** The open connections, in no particular order (a copy). */
  values(): C[] {
    return [...this.conns.values()];
  }

  /** The open connections, oldest first (for listings). */
  oldestFirst(): C[] {
    return [...this.conns.values()].sort((a, b) => a.openedAt - b.openedAt || (a.connectID < b.connectID ? -1 : a.connectID > b.connectID ? 1 : 0));
  }

  get(connectID: bigint): C | undefined {
    return this.conns.get(connectID);
  }

  /** Removes `conn` (if it is still the entry); returns whether it was. */
  remove(conn: C, now = Date.now()): boolean {
    if (this.conns.get(conn.connectID) !== conn) return false;
    this.conns.delete(conn.connectID);
    if (!conn.remoteClosed) this.tombstones.set(conn.connectID, now + TOMBSTONE_MS);
    return true;
  }

  /** Forgets a tombstone; true if there was one (the acknowledgement we waited for). */
  takeTombstone(connectID: bigint): boolean {
    return this.tombstones.delete(connectID);
  }

  isTombstoned(connectID: bigint, now = Date.now()): boolean {
    const expiry = this.tombstones.get(connectID);
    if (expiry === undefined) return false;
    if (expiry >= now) return true;
    this.tombstones.delete(connectID);
    return false;
  }

  sweep(now = Date.now()): void {
    // Deleting the entry being visited is safe in a Map's for-of.
    for (const [id, expiry] of this.tombstones) if (expiry < now) this.tombstones.delete(id);
  }

  /** Empties the table (the stream is gone) and returns what was in it. */
  takeAll(): C[] {
    const all = [...this.conns.values()];
    this.conns.clear();
    this.tombstones.clear();
    return all;
  }

  get size(): number {
    return this.conns.size;
  }

  get tombstoneCount(): number {
    return this.tombstones.size;
  }
}
