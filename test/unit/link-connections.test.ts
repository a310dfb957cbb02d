// The agent's dials on one link: DIAL_RSP is sent from the target socket's
// 'connect' event and the connection is built after it (HTTP/2 puts DIAL_RSP
// on the wire first, from a native immediate); a link that goes down between
// the two must not leave the target socket open with nobody to close it.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import type { Socket } from 'node:net';
import { test } from 'node:test';
import { AllowList } from '../../pkg/agent/allow-list.js';
import { DialLimit } from '../../pkg/agent/dial-limit.js';
import { Dialer } from '../../pkg/agent/dialer.js';
import { LinkConnections } from '../../pkg/agent/link-connections.js';
import { silentLogger } from '../../pkg/log/logger.js';
import type { KnownPacket } from '../../pkg/protocol/packet.js';
import { harness } from '../support/harness.js';
import { RecordingLink } from '../support/recording-link.js';
import { startTCPServer } from '../support/tunnel.js';

const LIMIT = { timeout: 20_000 };

test('a link that goes down between DIAL_RSP and the set-up of its connection closes the target socket', LIMIT, async (t) => {
  const h = harness(t);
  let accepted: (s: Socket) => void = () => {};
  const targetSide = new Promise<Socket>((resolve) => (accepted = resolve));
  const target = await startTCPServer(h, (s) => accepted(s));
  const sent: KnownPacket[] = [];
  let connsWhenAnswered = -1;
  const conns: LinkConnections = new LinkConnections(
    { dialer: new Dialer({ allowList: AllowList.parse('127.0.0.1') }), dialLimit: new DialLimit(), log: silentLogger() },
    (p) => {
      sent.push(p);
      if (p.type !== 'DIAL_RSP') return;
      connsWhenAnswered = conns.size;
      conns.closeAll(new Error('the link went down'));
    },
  );
  conns.linkUp({ link: new RecordingLink(), flow: undefined, halfClose: true });
  conns.dial({ type: 'DIAL_REQ', protocol: 'tcp', address: `127.0.0.1:${target.port}`, random: 7n });

  const socket = await targetSide;
  const closed = once(socket, 'close');
  socket.resume();
  await closed;
  assert.equal(sent[0]?.type, 'DIAL_RSP');
  assert.equal(connsWhenAnswered, 0, 'DIAL_RSP was sent before the connection was built');
  assert.equal(conns.size, 0);
});
