// The `agents` command's table: one unit style for bytes (IEC, one decimal).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatAgents, formatBytes } from '../../pkg/meta/agents-status.js';
import type { AgentStatus } from '../../pkg/tunnel/debug.js';

test('bytes print in IEC units with one decimal, never a bare Ki or Mi', () => {
  const cases: [number, string][] = [
    [0, '0B'],
    [85, '85B'],
    [1023, '1023B'],
    [1024, '1.0KiB'],
    [1536, '1.5KiB'],
    [1024 * 1024 - 1, '1.0MiB'],
    [Math.round(36.5 * 1024 ** 2), '36.5MiB'],
    [50 * 1024 ** 2, '50.0MiB'],
    [3 * 1024 ** 3, '3.0GiB'],
    [2 * 1024 ** 4, '2.0TiB'],
    [5000 * 1024 ** 4, '5000.0TiB'],
  ];
  for (const [n, text] of cases) assert.equal(formatBytes(n), text, String(n));
});

test('the wide table shows each agent stream with its bytes each way', () => {
  const agent: AgentStatus = {
    agentID: 'edge-1',
    identifiers: { ipv4: ['10.0.0.1'], ipv6: [], host: ['edge-1'], cidr: [], defaultRoute: false },
    serverID: 'server-a',
    remoteAddress: '10.0.0.1:40000',
    connectedSince: new Date(0).toISOString(),
    openConnections: 0,
    pendingDials: 0,
    bytesToAgent: 52_428_800,
    bytesFromAgent: 85,
    lastKeepaliveRoundTripMs: 0.4,
    draining: false,
    suspended: false,
    suspendedSince: null,
    resumes: 0,
    resumeWindowMs: null,
    stream: 1,
  };
  const lines = formatAgents([agent], 'wide', 30_000).split('\n');
  assert.match(lines[0]!, /\bSENT\s+RECEIVED\b/);
  assert.match(lines[1]!, /\s50\.0MiB\s+85B\s+server-a\s+no$/);
});
