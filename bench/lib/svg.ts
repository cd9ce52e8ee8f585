/**
 * A dependency-free line chart: time on x, one series on the left axis and one on the
 * right, and an optional dashed limit line on the left axis (the RSS target).
 */

export interface Series {
  label: string;
  unit: string;
  color: string;
  points: [number, number][];
}

export interface ChartOptions {
  title: string;
  left: Series;
  right?: Series;
  /** More series on the right axis (its scale fits them all), named in a legend. */
  rightMore?: Series[];
  leftLimit?: { value: number; label: string };
  /** What x counts (default seconds). */
  xLabel?: string;
  width?: number;
  height?: number;
}

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** A tick's number without the float's noise (0.6, not 0.6000000000000001). */
const label = (v: number) => String(Number(v.toPrecision(6)));

/** 0, a round step, …: about five ticks up to at least `max`. */
function ticks(max: number): number[] {
  const raw = max / 5 || 1;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? raw;
  const out: number[] = [];
  for (let v = 0; v <= max + step * 0.001; v += step) out.push(v);
  if (out[out.length - 1]! < max) out.push(out[out.length - 1]! + step);
  return out;
}

export function lineChart(o: ChartOptions): string {
  const width = o.width ?? 960;
  const height = o.height ?? 420;
  const m = { top: 40, right: 70, bottom: 45, left: 70 };
  const w = width - m.left - m.right;
  const h = height - m.top - m.bottom;
  const rights = o.right ? [o.right, ...(o.rightMore ?? [])] : [];
  const all = [...o.left.points, ...rights.flatMap((r) => r.points)];
  const xMax = Math.max(1, ...all.map((p) => p[0]));
  const leftTicks = ticks(Math.max(o.leftLimit?.value ?? 0, ...o.left.points.map((p) => p[1]), 1));
  const rightTicks = o.right
    ? ticks(Math.max(1, ...rights.flatMap((r) => r.points.map((p) => p[1]))))
    : [];
  const yL = (v: number) => m.top + h - (v / leftTicks[leftTicks.length - 1]!) * h;
  const yR = (v: number) => m.top + h - (v / (rightTicks[rightTicks.length - 1] ?? 1)) * h;
  const x = (t: number) => m.left + (t / xMax) * w;
  const path = (s: Series, y: (v: number) => number) =>
    `<polyline fill="none" stroke="${s.color}" stroke-width="1.5" points="${s.points
      .map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`)
      .join(' ')}"/>`;

  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="12">`,
    // The chart's accessible name (a reader of the page without images gets the title).
    `<title>${esc(o.title)}</title>`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${width / 2}" y="22" text-anchor="middle" font-size="15">${esc(o.title)}</text>`,
    `<line x1="${m.left}" y1="${m.top + h}" x2="${m.left + w}" y2="${m.top + h}" stroke="#333"/>`,
    `<line x1="${m.left}" y1="${m.top}" x2="${m.left}" y2="${m.top + h}" stroke="#333"/>`,
  ];
  for (const v of leftTicks) {
    parts.push(
      `<line x1="${m.left}" y1="${yL(v)}" x2="${m.left + w}" y2="${yL(v)}" stroke="#eee"/>`,
      `<text x="${m.left - 6}" y="${yL(v) + 4}" text-anchor="end" fill="${o.left.color}">${label(v)}</text>`,
    );
  }
  for (const v of rightTicks) {
    parts.push(
      `<text x="${m.left + w + 6}" y="${yR(v) + 4}" fill="${o.right!.color}">${label(v)}</text>`,
    );
  }
  for (const t of ticks(xMax)) {
    if (t > xMax) break;
    parts.push(`<text x="${x(t)}" y="${m.top + h + 16}" text-anchor="middle">${label(t)}</text>`);
  }
  parts.push(
    `<text x="${m.left + w / 2}" y="${height - 8}" text-anchor="middle">${esc(o.xLabel ?? 'seconds')}</text>`,
    `<text x="16" y="${m.top + h / 2}" transform="rotate(-90 16 ${m.top + h / 2})" text-anchor="middle" fill="${o.left.color}">${esc(`${o.left.label} (${o.left.unit})`)}</text>`,
  );
  if (o.right) {
    parts.push(
      `<text x="${width - 14}" y="${m.top + h / 2}" transform="rotate(90 ${width - 14} ${m.top + h / 2})" text-anchor="middle" fill="${o.right.color}">${esc(`${o.right.label} (${o.right.unit})`)}</text>`,
      ...rights.map((r) => path(r, yR)),
    );
  }
  if (o.rightMore?.length) {
    rights.forEach((r, i) => {
      const y = m.top + 14 + i * 16;
      parts.push(
        `<line x1="${m.left + 10}" y1="${y - 4}" x2="${m.left + 30}" y2="${y - 4}" stroke="${r.color}" stroke-width="2"/>`,
        `<text x="${m.left + 36}" y="${y}" fill="${r.color}">${esc(r.label)}</text>`,
      );
    });
  }
  if (o.leftLimit) {
    const y = yL(o.leftLimit.value);
    parts.push(
      `<line x1="${m.left}" y1="${y}" x2="${m.left + w}" y2="${y}" stroke="#c00" stroke-dasharray="6 4"/>`,
      `<text x="${m.left + w - 4}" y="${y - 5}" text-anchor="end" fill="#c00">${esc(o.leftLimit.label)}</text>`,
    );
  }
  parts.push(path(o.left, yL), '</svg>');
  return `${parts.join('\n')}\n`;
}
