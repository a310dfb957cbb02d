// Line charts as SVG text, no dependency: the scale bench's figures as
// curves (people read a curve faster than a table). x may be logarithmic.

export interface Series {
  name: string;
  points: Array<[number, number]>;
  color: string;
  dashed?: boolean;
}

export interface Chart {
  title: string;
  xLabel: string;
  yLabel: string;
  xLog?: boolean;
  series: Series[];
}

const W = 420;
const H = 300;
const M = { left: 64, right: 16, top: 36, bottom: 48 };

function niceMax(v: number): number {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function fmt(v: number): string {
  if (v >= 1000) return `${+(v / 1000).toFixed(1)}k`;
  return `${+v.toFixed(v < 10 ? 2 : 0)}`;
}

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function chart(c: Chart, ox: number): string {
  const all = c.series.flatMap((s) => s.points);
  if (all.length === 0) return '';
  const xs = all.map(([x]) => x);
  const [xMin, xMax] = [Math.min(...xs), Math.max(...xs)];
  const yMax = niceMax(Math.max(...all.map(([, y]) => y)));
  const pw = W - M.left - M.right;
  const ph = H - M.top - M.bottom;
  const sx = (x: number): number => {
    if (xMax === xMin) return M.left + pw / 2;
    const t = c.xLog ? (Math.log10(x) - Math.log10(xMin)) / (Math.log10(xMax) - Math.log10(xMin)) : (x - xMin) / (xMax - xMin);
    return M.left + t * pw;
  };
  const sy = (y: number): number => M.top + ph - (y / yMax) * ph;
  const out: string[] = [`<g transform="translate(${ox},0)">`];
  out.push(`<text x="${W / 2}" y="20" text-anchor="middle" font-size="14" font-weight="bold">${esc(c.title)}</text>`);
  for (let i = 0; i <= 4; i++) {
    const y = (yMax * i) / 4;
    out.push(`<line x1="${M.left}" x2="${M.left + pw}" y1="${sy(y)}" y2="${sy(y)}" stroke="#ddd"/>`);
    out.push(`<text x="${M.left - 6}" y="${sy(y) + 4}" text-anchor="end" font-size="11">${fmt(y)}</text>`);
  }
  for (const x of [...new Set(xs)].sort((a, b) => a - b)) {
    out.push(`<line x1="${sx(x)}" x2="${sx(x)}" y1="${M.top}" y2="${M.top + ph}" stroke="#eee"/>`);
    out.push(`<text x="${sx(x)}" y="${M.top + ph + 16}" text-anchor="middle" font-size="11">${fmt(x)}</text>`);
  }
  out.push(`<text x="${M.left + pw / 2}" y="${H - 8}" text-anchor="middle" font-size="12">${esc(c.xLabel)}</text>`);
  out.push(`<text transform="translate(14,${M.top + ph / 2}) rotate(-90)" text-anchor="middle" font-size="12">${esc(c.yLabel)}</text>`);
  // A series with no points (e.g. no Go agents in this run) gets no line and no legend entry.
  c.series
    .filter((s) => s.points.length > 0)
    .forEach((s, i) => {
      const pts = [...s.points].sort((a, b) => a[0] - b[0]);
      const d = pts.map(([x, y], j) => `${j === 0 ? 'M' : 'L'}${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(' ');
      out.push(`<path d="${d}" fill="none" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="5,4"' : ''}/>`);
      for (const [x, y] of pts) out.push(`<circle cx="${sx(x).toFixed(1)}" cy="${sy(y).toFixed(1)}" r="3" fill="${s.color}"/>`);
      const ly = M.top + 6 + i * 15;
      out.push(
        `<line x1="${M.left + 8}" x2="${M.left + 28}" y1="${ly}" y2="${ly}" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="5,4"' : ''}/>`,
      );
      out.push(`<text x="${M.left + 32}" y="${ly + 4}" font-size="11">${esc(s.name)}</text>`);
    });
  out.push('</g>');
  return out.join('\n');
}

/** Charts side by side in one SVG document, with a caption line under them. */
export function svgCharts(charts: Chart[], caption: string): string {
  const width = W * charts.length;
  const height = H + 24;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    ...charts.map((c, i) => chart(c, i * W)),
    `<text x="8" y="${H + 16}" font-size="11" fill="#555">${esc(caption)}</text>`,
    '</svg>',
    '',
  ].join('\n');
}
