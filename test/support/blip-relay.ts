// A loopback TCP relay for tests, standing between agents and servers: it
// sends each new connection to the next of its target ports in turn (a
// Service or load balancer in front of replicas; one port is a plain relay),
// and the test can make the network blip the two ways edge links fail:
//
// - reset: every connection through it is reset (RST to both ends), and for
//   the blip's length new connections are reset as soon as they arrive, as if
//   refused; then it heals.
// - silent: nothing is forwarded either way, not even a close, as when a path
//   goes dark. Connections made during the blip are held (the client's bytes
//   wait, as behind a retransmitted SYN) and go through once it heals. Those
//   that were open stay dark after it heals (oldFlows 'dead', the default: a
//   NAT rebinding or a new address forgets them), or carry on where they
//   stopped (oldFlows 'resume': loss that TCP retransmission outlasts).
//
// The relay reads nothing from a dark connection, so its senders meet TCP's
// back-pressure, as over a dead path; and it never closes one end because the
// other closed. Everything it opened is closed when the test ends.

import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import type { Harness } from './harness.js';

export type BlipKind = 'reset' | 'silent';

export interface BlipOptions {
  /** After a silent blip: connections open during it stay dark ('dead', default) or carry on ('resume'). */
  oldFlows?: 'dead' | 'resume';
}

interface Pair {
  client: Socket;
  upstream: Socket | undefined;
  /** live: forwarding; held: accepted during a silent blip, not connected yet; paused: dark until heal; dead: dark for good. */
  state: 'live' | 'held' | 'paused' | 'dead';
}

export interface BlipRelay {
  port: number;
  /** Ports new connections go to, in turn; the test may change the array while the relay runs. */
  targets: number[];
  /** A blip of `kind` for `ms`; resolves once it has healed. */
  blip(kind: BlipKind, ms: number, opts?: BlipOptions): Promise<void>;
  /** A silent blip with no end (until heal()): the black hole of a dead link. */
  freeze(opts?: BlipOptions): void;
  /** Ends the blip now. */
  heal(): void;
  /**
   * Resets the connections a silent blip left dark (RST to both ends): their end reaches the peers at last.
   * `'server'`: only the server's end is reset, and the agent's stays dark (its RST lost, or read late under
   * load): the server hears of the drop before the agent does.
   */
  resetDark(ends?: 'both' | 'server'): void;
  /** Connections through the relay that have not closed on both sides. */
  connections(): number;
  /** Connections accepted, and of those reset at once during reset blips. */
  readonly counts: { accepted: number; refused: number; reset: number };
}

/** Resets a socket (RST); one already shut down for writing cannot be, and is destroyed. */
function reset(s: Socket | undefined): void {
  if (s === undefined || s.destroyed) return;
  if (s.writableEnded) s.destroy();
  else s.resetAndDestroy();
}

export async function startBlipRelay(h: Harness, targets: number[]): Promise<BlipRelay> {
  const pairs = new Set<Pair>();
  const counts = { accepted: 0, refused: 0, reset: 0 };
  let mode: 'normal' | 'refusing' | 'silent' = 'normal';
  let oldFlows: 'dead' | 'resume' = 'dead';
  let next = 0;
  let healTimer: NodeJS.Timeout | undefined;
  const healed: Array<() => void> = [];

  const forget = (pair: Pair): void => {
    if (pair.client.destroyed && (pair.upstream === undefined || pair.upstream.destroyed)) pairs.delete(pair);
  };

  const forward = (pair: Pair): void => {
    const { client, upstream } = pair;
    pair.state = 'live';
    client.pipe(upstream!);
    upstream!.pipe(client);
    client.resume();
    upstream!.resume();
  };

  const darken = (pair: Pair, state: 'paused' | 'dead'): void => {
    pair.state = state;
    pair.client.unpipe();
    pair.upstream?.unpipe();
    pair.client.pause();
    pair.upstream?.pause();
  };

  const connectUpstream = (pair: Pair): void => {
    const upstream = connect(targets[next++ % targets.length]!, '127.0.0.1');
    pair.upstream = upstream;
    upstream.setNoDelay(true);
    upstream.on('error', () => {});
    // A close crosses only while the pair is live: a dark path carries nothing.
    upstream.once('close', () => {
      if (pair.state === 'live') pair.client.destroy();
      forget(pair);
    });
    forward(pair);
  };

  const server = createServer((client) => {
    counts.accepted++;
    client.on('error', () => {});
    client.setNoDelay(true);
    if (mode === 'refusing') {
      counts.refused++;
      client.resetAndDestroy();
      return;
    }
    const pair: Pair = { client, upstream: undefined, state: 'held' };
    pairs.add(pair);
    client.once('close', () => {
      if (pair.state === 'live') pair.upstream?.destroy();
      forget(pair);
    });
    if (mode === 'silent') client.pause();
    else connectUpstream(pair);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');

  const heal = (): void => {
    clearTimeout(healTimer);
    healTimer = undefined;
    const was = mode;
    mode = 'normal';
    if (was === 'silent') {
      for (const pair of pairs) {
        if (pair.state === 'held' && !pair.client.destroyed) connectUpstream(pair);
        else if (pair.state === 'paused') forward(pair);
      }
    }
    for (const resolve of healed.splice(0)) resolve();
  };

  const start = (kind: BlipKind, opts: BlipOptions): void => {
    clearTimeout(healTimer);
    if (kind === 'reset') {
      mode = 'refusing';
      for (const pair of pairs) {
        if (pair.state !== 'live' && pair.state !== 'held') continue;
        counts.reset++;
        pair.state = 'dead';
        reset(pair.client);
        reset(pair.upstream);
      }
      return;
    }
    mode = 'silent';
    oldFlows = opts.oldFlows ?? 'dead';
    for (const pair of pairs) if (pair.state === 'live') darken(pair, oldFlows === 'dead' ? 'dead' : 'paused');
  };

  h.defer(
    () =>
      new Promise<void>((resolve) => {
        clearTimeout(healTimer);
        for (const resolveHeal of healed.splice(0)) resolveHeal();
        for (const { client, upstream } of pairs) {
          client.destroy();
          upstream?.destroy();
        }
        server.close(() => resolve());
      }),
  );

  return {
    port: (server.address() as AddressInfo).port,
    targets,
    counts,
    blip(kind, ms, opts = {}) {
      start(kind, opts);
      return new Promise<void>((resolve) => {
        healed.push(resolve);
        healTimer = setTimeout(heal, ms);
      });
    },
    freeze(opts = {}) {
      start('silent', opts);
    },
    heal,
    resetDark(ends = 'both') {
      for (const pair of pairs) {
        if (pair.state !== 'paused' && pair.state !== 'dead') continue;
        counts.reset++;
        pair.state = 'dead';
        if (ends === 'both') reset(pair.client);
        reset(pair.upstream);
      }
    },
    connections: () => pairs.size,
  };
}
