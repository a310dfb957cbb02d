// The human side of a scenario's report: one table layout for every scenario
// (its --json figures are written by bench/main.ts).

/** The header, a rule, then the rows; every column as wide as its widest cell. */
export function formatTable(header: readonly string[], rows: ReadonlyArray<readonly string[]>): string {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => (r[i] ?? '').length)));
  const line = (r: readonly string[]): string =>
    widths
      .map((w, i) => (r[i] ?? '').padEnd(w))
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}
