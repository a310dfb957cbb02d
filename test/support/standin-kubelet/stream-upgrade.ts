// Answers an upgrade request on /exec, /attach or /portForward once the
// negotiation (upgrade.ts) has decided: a refusal, a WebSocket exec session,
// or a SPDY session serving exec or port-forward.

import type { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { parseStreamOptions, planExec } from './exec.js';
import { switchingProtocolsHead, writeBareStatus, writeRawResponse } from './http-response.js';
import type { ResolvedOptions } from './options.js';
import { servePortForward, type PortForwardRecord } from './port-forward.js';
import type { Route } from './routes.js';
import { serveSpdyExec } from './spdy-exec.js';
import { SpdySession } from './spdy-session.js';
import type { UpgradeDecision } from './upgrade.js';
import { WebSocketExecSession } from './ws-exec.js';

export type StreamRoute = Extract<Route, { kind: 'stream' | 'portForward' }>;

export interface UpgradeContext {
  opts: ResolvedOptions;
  /** Keeps a session until it closes, so that close() can destroy it. */
  hold(session: EventEmitter & { destroy(): void }): void;
  /** Keeps an outgoing socket until it closes. */
  track(socket: Socket): void;
  recordPortForward(rec: PortForwardRecord): void;
}

export function answerStreamUpgrade(ctx: UpgradeContext, socket: Duplex, head: Buffer, r: StreamRoute, query: URLSearchParams, d: UpgradeDecision): void {
  const log = ctx.opts.logger;
  switch (d.kind) {
    case 'respond':
      writeRawResponse(socket, d.response);
      return;
    case 'bare':
      writeBareStatus(socket, d.status, d.text);
      return;
    case 'websocket': {
      if (r.kind !== 'stream') throw new Error('WebSocket is only negotiated for exec and attach');
      const options = parseStreamOptions(query, r.stream);
      if (typeof options === 'string') throw new Error(options);
      socket.write(
        switchingProtocolsHead([
          ['Upgrade', 'websocket'],
          ['Connection', 'Upgrade'],
          ['Sec-WebSocket-Accept', d.accept],
          ['Sec-WebSocket-Protocol', d.protocol],
        ]),
      );
      const session = new WebSocketExecSession({
        socket,
        head,
        protocol: d.protocol,
        options,
        plan: planExec(options),
        startDelayMs: ctx.opts.execStartDelayMs,
        closeTimeoutMs: ctx.opts.closeTimeoutMs,
        logger: log,
      });
      ctx.hold(session);
      session.start();
      return;
    }
    case 'spdy': {
      // Header order as Go's server writes it.
      socket.write(
        switchingProtocolsHead([
          ['Connection', 'Upgrade'],
          ['Upgrade', 'SPDY/3.1'],
          ['X-Stream-Protocol-Version', d.protocol],
          ['Date', new Date().toUTCString()],
          ['Content-Length', '0'],
        ]),
      );
      const session = new SpdySession(socket, { role: 'server', closeTimeoutMs: ctx.opts.closeTimeoutMs, logger: log });
      ctx.hold(session);
      if (r.kind === 'portForward') {
        servePortForward({
          session,
          pod: `${r.namespace}/${r.pod}`,
          targets: ctx.opts.targets,
          streamCreationTimeoutMs: ctx.opts.streamCreationTimeoutMs,
          logger: log,
          track: (s) => ctx.track(s),
          record: (rec) => ctx.recordPortForward(rec),
        });
      } else {
        const options = parseStreamOptions(query, r.stream);
        if (typeof options === 'string') throw new Error(options);
        serveSpdyExec({
          session,
          protocol: d.protocol,
          options,
          plan: planExec(options),
          streamCreationTimeoutMs: ctx.opts.streamCreationTimeoutMs,
          logger: log,
        });
      }
      // Frames that came with the upgrade request go in only once the handlers listen.
      session.receive(head);
      return;
    }
    default: {
      const never: never = d;
      throw new Error(`unhandled upgrade decision ${JSON.stringify(never)}`);
    }
  }
}
