// Which ends of an agent's link leave its session to be resumed (session
// resume, issue 18): only a failure nobody chose; every meant end closes.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { endsWithoutGoodbye, type AgentLinkEndKind } from '../../pkg/tunnel/agent-link.js';

test('only a failed link ends without a goodbye; leaving, a shutdown, a cut-off or a lost session do not', () => {
  const expected: Record<AgentLinkEndKind, boolean> = {
    // A reset, a lost connection, a keepalive timeout, a stream error: the agent may come back.
    failed: true,
    // The agent half-closed its call (it drains or stops): a goodbye.
    left: false,
    // This server is stopping: it says so with a status.
    shutdown: false,
    // A penalty must not be dodged by reconnecting.
    'cut-off': false,
    // The window passed: the session is over.
    lost: false,
  };
  for (const [kind, suspends] of Object.entries(expected)) {
    assert.equal(endsWithoutGoodbye({ kind: kind as AgentLinkEndKind, message: 'x' }), suspends, kind);
  }
});
