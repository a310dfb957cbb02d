// `yurt-tunnel-server agents`: the connected agents from a server's meta
// port, as a table (as `kubectl get` prints), wide, or JSON.

import { request } from 'node:http';
import { errorMessage } from '../protocol/errors.js';
import type { AgentStatus } from '../tunnel/debug.js';

export type AgentsOutput = 'table' | 'wide' | 'json';

export function fetchAgents(metaAddr: string, timeoutMs = 5000): Promise<AgentStatus[]> {
  const url = new URL(`http://${metaAddr}/debug/agents`);
  return new Promise((resolve, reject) => {
    const req = request(url, { timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => {
        if (res.statusCode !== 200) {
          reject(new Error(`${url.href} answered ${res.statusCode}: ${body.trim()}`));
          return;
        }
        try {
          resolve(JSON.parse(body) as AgentStatus[]);
        } catch (err: unknown) {
          reject(new Error(`${url.href} did not answer JSON: ${errorMessage(err)}`));
        }
      });
    });
    req.on('timeout', () => req.destroy(new Error(`no answer from ${url.href} within ${timeoutMs} ms`)));
    req.on('error', (err: Error) =>
      reject(new Error(`cannot reach the meta server at ${metaAddr} (${err.message}); is yurt-tunnel-server running with --meta-port?`)),
    );
    req.end();
  });
}

function age(since: string, now: number): string {
  const s = Math.max(0, Math.floor((now - Date.parse(since)) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172_800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}

const IEC_UNITS = ['KiB', 'MiB', 'GiB', 'TiB'];

/** Bytes in IEC units, one decimal from a KiB on: 85B, 3.5KiB, 36.5MiB (no space: a table column stays one word). */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n}B`;
  let value = n / 1024;
  let unit = 0;
  // 1023.96 KiB would print as 1024.0KiB: that is 1.0MiB.
  while (value >= 1023.95 && unit < IEC_UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)}${IEC_UNITS[unit]}`;
}

export function formatAgents(agents: readonly AgentStatus[], output: AgentsOutput, now = Date.now()): string {
  if (output === 'json') return `${JSON.stringify(agents, null, 2)}\n`;
  if (agents.length === 0) return 'No agents connected.\n';
  const header = ['AGENT', 'ADDRESSES', 'CONNECTIONS', 'AGE', 'RTT', 'STATUS'];
  if (output === 'wide') header.push('HOSTS', 'FROM', 'SENT', 'RECEIVED', 'SERVER', 'DRAINING');
  const rows = [...agents]
    .sort((a, b) => a.agentID.localeCompare(b.agentID) || a.stream - b.stream)
    .map((a) => {
      const row = [
        a.agentID,
        [...a.identifiers.ipv4, ...a.identifiers.ipv6].join(',') || '<none>',
        String(a.openConnections),
        age(a.connectedSince, now),
        a.lastKeepaliveRoundTripMs === null ? '-' : `${a.lastKeepaliveRoundTripMs.toFixed(1)}ms`,
        // SUSPENDED: its link dropped and its connections wait for it to resume (session resume).
        a.suspended ? 'SUSPENDED' : a.draining ? 'DRAINING' : 'READY',
      ];
      if (output === 'wide') {
        row.push(
          a.identifiers.host.join(',') || '<none>',
          a.remoteAddress,
          formatBytes(a.bytesToAgent),
          formatBytes(a.bytesFromAgent),
          a.serverID,
          a.draining ? 'yes' : 'no',
        );
      }
      return row;
    });
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]): string => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]! + 3))).join('');
  return `${[line(header), ...rows.map(line)].join('\n')}\n`;
}
