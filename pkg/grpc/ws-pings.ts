// Keepalive (keepalive.ts) over a WebSocket: a ping frame, and the round
// trip when its pong comes back. One ping out at a time, like an HTTP/2
// session's outstanding-ping limit of one for our use.

import type WebSocket from 'ws';
import type { Pingable } from './keepalive.js';

export class WsPings implements Pingable {
  private waiting: { sentAt: number; cb: (err: Error | null, durationMs: number) => void } | undefined;

  constructor(private readonly ws: WebSocket) {
    ws.on('pong', () => {
      const w = this.waiting;
      if (w === undefined) return;
      this.waiting = undefined;
      w.cb(null, performance.now() - w.sentAt);
    });
    ws.once('close', () => {
      const w = this.waiting;
      this.waiting = undefined;
      w?.cb(new Error('the WebSocket closed'), 0);
    });
  }

  get destroyed(): boolean {
    return this.ws.readyState !== this.ws.OPEN;
  }

  ping(cb: (err: Error | null, durationMs: number) => void): boolean {
    if (this.waiting !== undefined || this.destroyed) return false;
    this.waiting = { sentAt: performance.now(), cb };
    this.ws.ping();
    return true;
  }
}
