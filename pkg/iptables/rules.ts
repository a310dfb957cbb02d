// The nat table's text, both ways: our chains as iptables-save prints them
// (so that what is there compares equal to what we want), what iptables-save
// shows of ours, and the iptables-restore --noflush input that turns one
// into the other in one transaction. Pure; the manager runs the commands.
//
//   OUTPUT          -p tcp -m comment --comment "yurttunnel server port" -j TUNNEL-PORT
//   TUNNEL-PORT     -p tcp -m tcp --dport P -m comment --comment "jump to port P" -j TUNNEL-PORT-P       (each port)
//   TUNNEL-PORT-P   -d CIDR -p tcp -m tcp --dport P -m comment --comment "return request to access node directly" -j RETURN
//                   -p tcp -m tcp --dport P -m comment --comment "dnat to tunnel for access node" -j DNAT --to-destination ADDR

import type { FamilyTargets } from './targets.js';

export const TUNNEL_PORT_CHAIN = 'TUNNEL-PORT';
const PORT_CHAIN = /^TUNNEL-PORT-\d+$/;
/** The rule in OUTPUT that sends TCP into our chains (OpenYurt's, so an earlier OpenYurt's is recognised). */
export const OUTPUT_JUMP = `-p tcp -m comment --comment "yurttunnel server port" -j ${TUNNEL_PORT_CHAIN}`;

/** Chain name → its rules (without `-A <chain> `), in order. */
export type Chains = Map<string, string[]>;

export function portChain(port: number): string {
  return `${TUNNEL_PORT_CHAIN}-${port}`;
}

/** TUNNEL-PORT and TUNNEL-PORT-<digits>: the chains we own (and delete when stale). */
export function isOurChain(name: string): boolean {
  return name === TUNNEL_PORT_CHAIN || PORT_CHAIN.test(name);
}

/** Our chains for one family, TUNNEL-PORT first, then by port; none when no port has a target. */
export function desiredChains(t: FamilyTargets): Chains {
  if (t.dnat.size === 0) return new Map();
  const chains: Chains = new Map([[TUNNEL_PORT_CHAIN, []]]);
  for (const [port, to] of [...t.dnat].sort(([a], [b]) => a - b)) {
    const chain = portChain(port);
    const match = `-p tcp -m tcp --dport ${port}`;
    chains.get(TUNNEL_PORT_CHAIN)!.push(`${match} -m comment --comment "jump to port ${port}" -j ${chain}`);
    chains.set(chain, [
      ...t.direct.map((cidr) => `-d ${cidr} ${match} -m comment --comment "return request to access node directly" -j RETURN`),
      `${match} -m comment --comment "dnat to tunnel for access node" -j DNAT --to-destination ${to}`,
    ]);
  }
  return chains;
}

export interface NatTable {
  /** Our chains and their rules as iptables-save printed them. */
  chains: Chains;
  /** Rules of other chains that jump (or go) to one of ours, in order. */
  jumps: { chain: string; rule: string }[];
  /** Rules of the table that are neither ours nor jumps to ours. */
  otherRules: number;
}

const JUMP_TO = /(?:^| )-[jg] (\S+)(?: |$)/;

/** The nat table of an `iptables-save -t nat` output (other tables in it are ignored). */
export function parseNatTable(save: string): NatTable {
  const table: NatTable = { chains: new Map(), jumps: [], otherRules: 0 };
  let inNat = false;
  for (const line of save.split('\n')) {
    if (line.startsWith('*')) {
      inNat = line === '*nat';
      continue;
    }
    if (!inNat) continue;
    if (line.startsWith(':')) {
      const name = line.slice(1).split(' ')[0]!;
      if (isOurChain(name) && !table.chains.has(name)) table.chains.set(name, []);
      continue;
    }
    const m = /^-A (\S+) (.*)$/.exec(line);
    if (m === null) continue;
    const [, chain, rule] = m as unknown as [string, string, string];
    if (isOurChain(chain)) {
      if (!table.chains.has(chain)) table.chains.set(chain, []);
      table.chains.get(chain)!.push(rule);
    } else if (isOurChain(JUMP_TO.exec(rule)?.[1] ?? '')) {
      table.jumps.push({ chain, rule });
    } else {
      table.otherRules++;
    }
  }
  return table;
}

/** Rules in an iptables-save output (every table) that are not ours: what picks the backend. */
export function countOtherRules(save: string): number {
  let n = 0;
  for (const line of save.split('\n')) {
    const m = /^-A (\S+) (.*)$/.exec(line);
    if (m !== null && !isOurChain(m[1]!) && !isOurChain(JUMP_TO.exec(m[2]!)?.[1] ?? '')) n++;
  }
  return n;
}

function sameChains(a: Chains, b: Chains): boolean {
  if (a.size !== b.size) return false;
  for (const [name, rules] of a) {
    const other = b.get(name);
    if (other === undefined || other.length !== rules.length || other.some((r, i) => r !== rules[i])) return false;
  }
  return true;
}

/** True when the table holds exactly `desired` and one OUTPUT jump (nothing to restore). */
export function isInSync(current: NatTable, desired: Chains): boolean {
  if (desired.size === 0) return current.chains.size === 0 && current.jumps.length === 0;
  return sameChains(current.chains, desired) && current.jumps.length === 1 && current.jumps[0]!.chain === 'OUTPUT' && current.jumps[0]!.rule === OUTPUT_JUMP;
}

/**
 * The iptables-restore --noflush input that makes the table hold `desired`
 * (nothing of ours when it is empty): every chain of ours declared (which
 * flushes it) and refilled, stale chains deleted, exactly one OUTPUT jump.
 * Undefined when the table is already so.
 */
export function restoreText(current: NatTable, desired: Chains): string | undefined {
  if (isInSync(current, desired)) return undefined;
  const names = [...desired.keys(), ...[...current.chains.keys()].filter((c) => !desired.has(c))];
  const lines = ['*nat', ...names.map((c) => `:${c} - [0:0]`)];
  // Keep the first OUTPUT jump if it is ours as it should be; delete every other rule that jumps to our chains.
  const keep = desired.size > 0 ? current.jumps.findIndex((j) => j.chain === 'OUTPUT' && j.rule === OUTPUT_JUMP) : -1;
  current.jumps.forEach((j, i) => {
    if (i !== keep) lines.push(`-D ${j.chain} ${j.rule}`);
  });
  if (desired.size > 0 && keep === -1) lines.push(`-I OUTPUT 1 ${OUTPUT_JUMP}`);
  for (const [chain, rules] of desired) for (const rule of rules) lines.push(`-A ${chain} ${rule}`);
  for (const c of current.chains.keys()) if (!desired.has(c)) lines.push(`-X ${c}`);
  lines.push('COMMIT', '');
  return lines.join('\n');
}

/** One line for logs: the ports and how many addresses are reached directly. */
export function describeChains(chains: Chains): string {
  const ports = [...chains.keys()].filter((c) => c !== TUNNEL_PORT_CHAIN).map((c) => c.slice(TUNNEL_PORT_CHAIN.length + 1));
  return ports.length === 0 ? 'none' : `ports ${ports.join(',')}`;
}
