// What a new link of an agent that resumed none of its sessions does to the
// links and sessions that agent left behind.

import type { LogLimiter } from '../log/log-limiter.js';
import type { Backend } from '../tunnel/backend.js';
import { sameOwner, type SessionOwner } from '../tunnel/session-table.js';
import type { Tunnel } from '../tunnel/tunnel.js';
import { isServedCall, type LinkConnection, type ServedCall } from './served-call.js';

/** How long, at least, an older link of a reconnected agent has to show a sign of life. */
const LIVENESS_CHECK_MS = 1000;

/** What of the endpoint the check uses. */
export interface EndpointParts {
  tunnel: Tunnel;
  connectionOf: WeakMap<ServedCall, LinkConnection>;
  limited: LogLimiter;
}

/**
 * `backend`, a new link of `owner`, claims none of the agent's sessions and
 * is no probe: a new process (an agent killed and started again).
 * The sessions it left suspended cannot come back: they end now
 * (Sessions.endLeftBehind). An older link of the same owner that still
 * looks alive may be the killed process's too: node:http2 does not always
 * report the reset of a connection whose peer died until keepalive gives up
 * (~30 s), and meanwhile new dials would go to it (of an agent's links the
 * oldest serves). A live agent keeps one link per server and closes a
 * duplicate at once, so such a link is asked for a sign of life; with none,
 * and the new link still there, its session ends, even if the link dropped
 * during the check (its reset read late, keepalive, AgentConnection's flow
 * watch): suspended after this link came, its session would otherwise wait
 * the whole window for an agent that is gone.
 */
export function replaceLinksLeftBehind(endpoint: EndpointParts, backend: Backend, owner: SessionOwner): void {
  endpoint.tunnel.sessions.endLeftBehind(backend, owner);
  for (const old of [...endpoint.tunnel.registry.streamsOf(owner.agentID)]) {
    const link = old.sessionLink;
    const call = link?.transport;
    if (old === backend || old.session === undefined || link === undefined || !isServedCall(call) || !sameOwner(old.session.owner, owner)) continue;
    const connection = endpoint.connectionOf.get(call);
    if (connection === undefined) continue;
    const timeoutMs = Math.max(LIVENESS_CHECK_MS, 4 * (connection.roundTripMs ?? 0));
    const receivedBefore = link.received;
    void connection.answers(timeoutMs).then((alive) => {
      // A packet of the session is an answer too: answers() says false for a link that died after answering.
      if (alive || link.received !== receivedBefore || backend.closed || old.closed) return;
      // Taken by a resume meanwhile: the agent holding it is alive.
      if (link.transport !== undefined && link.transport !== call) return;
      endpoint.limited.warn('an older link of a reconnected agent gave no sign of life; dropping it', {
        agentID: owner.agentID,
        stream: old.serial,
        newStream: backend.serial,
        remoteAddress: connection.remoteAddress,
        timeoutMs,
      });
      endpoint.tunnel.endReplaced(old, backend);
      connection.drop(`no sign of life within ${timeoutMs} ms after a new link of agent ${owner.agentID} connected`);
    });
  }
}
