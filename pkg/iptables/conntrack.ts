// Which conntrack entries a rule change leaves stale, as `conntrack` argument
// lists (OpenYurt's choice, spec/yurttunnel.md §4.2): every entry towards an
// address that started or stopped being reached directly, on each of our
// ports; and the DNATed entries of a port that was removed or now goes to
// another master port. Pure; the manager runs them.

import type { FamilyTargets } from './targets.js';

function familyArgs(t: FamilyTargets): string[] {
  return t.family === 6 ? ['-f', 'ipv6'] : [];
}

/** Argument lists for `conntrack` after the rules went from `before` to `after` (one family). */
export function staleConntrackEntries(before: FamilyTargets, after: FamilyTargets): string[][] {
  const commands: string[][] = [];
  const ports = [...new Set([...before.dnat.keys(), ...after.dnat.keys()])].sort((a, b) => a - b);
  const was = new Set(before.direct);
  const is = new Set(after.direct);
  const changed = [...new Set([...was, ...is])].filter((cidr) => was.has(cidr) !== is.has(cidr)).sort();
  for (const cidr of changed) {
    const ip = cidr.slice(0, cidr.indexOf('/'));
    for (const port of ports) commands.push(['-D', ...familyArgs(after), '--orig-dst', ip, '-p', 'tcp', '--dport', String(port)]);
  }
  for (const [port, to] of before.dnat) {
    if (after.dnat.get(port) !== to) commands.push(['-D', ...familyArgs(after), '-p', 'tcp', '--dport', String(port), '--dst-nat']);
  }
  return commands;
}
