import { escapeHtml } from './html.ts';

/**
 * A small bar chart (stacked when given several series): inline SVG for the bars, no script,
 * no external asset. One bar per minute (or per `stepMinutes`). The text — the y axis's
 * maximum, the dates and times under the x axis, "nothing in this window" — is HTML beside
 * the SVG, not SVG text: the SVG stretches to its box (preserveAspectRatio none), so text in
 * it would shrink on a phone (5 px at 390 px) and swell on a wide screen; as HTML it is the
 * page's own size everywhere. `marked` shades the points it flags (open gaps on the coverage
 * chart), so a hole reads as a hole even when its bar is empty.
 */

export interface ChartSeries {
  label: string;
  color: string;
  values: number[];
}

export interface ChartOptions {
  title: string;
  /** The first point's time; each point is one minute (or `stepMinutes`). */
  start: Date;
  stepMinutes?: number;
  /** Points to shade behind the bars, with what the shading means. */
  marked?: { label: string; color: string; at: boolean[] };
}

/** The SVG's own coordinates: bars are drawn in these and stretched to the box. */
const VIEW_W = 1000;
const VIEW_H = 150;
/** Dates under the x axis: the first point, the middle, the last (room for three on a phone). */
const X_LABELS = 3;

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** "Dec 2 14:05" (UTC): a date with the time, short enough for four under a phone's chart. */
export function dateTick(d: Date): string {
  return `${MONTHS[d.getUTCMonth()]} ${d.getUTCDate()} ${d.toISOString().slice(11, 16)}`;
}

export function barChart(series: ChartSeries[], opts: ChartOptions): string {
  const points = Math.max(1, ...series.map((s) => s.values.length));
  const totals = Array.from({ length: points }, (_, i) =>
    series.reduce((sum, s) => sum + (s.values[i] ?? 0), 0),
  );
  const max = Math.max(1, ...totals);
  const step = VIEW_W / points;
  const barW = Math.max(0.5, step * (step > 3 ? 0.8 : 1));
  const y = (v: number) => VIEW_H - (v / max) * VIEW_H;
  const stepMs = (opts.stepMinutes ?? 1) * 60_000;
  const timeOf = (i: number) => new Date(opts.start.getTime() + i * stepMs);
  const at = (i: number) => dateTick(timeOf(i));

  const bars: string[] = [];
  const marked = opts.marked;
  if (marked) {
    for (let i = 0; i < points; i++) {
      if (!marked.at[i]) continue;
      bars.push(
        `<rect class="mark" x="${(i * step).toFixed(1)}" y="0" width="${step.toFixed(1)}" height="${VIEW_H}" fill="${marked.color}" fill-opacity="0.18"><title>${at(i)} ${escapeHtml(marked.label)}</title></rect>`,
      );
    }
  }
  for (let i = 0; i < points; i++) {
    let base = 0;
    for (const s of series) {
      const v = s.values[i] ?? 0;
      if (v === 0) continue;
      const top = y(base + v);
      const h = y(base) - top;
      bars.push(
        `<rect x="${(i * step).toFixed(1)}" y="${top.toFixed(1)}" width="${barW.toFixed(1)}" height="${Math.max(h, 0.5).toFixed(1)}" fill="${s.color}"><title>${at(i)} ${escapeHtml(s.label)}: ${v}</title></rect>`,
      );
      base += v;
    }
  }

  // Dates under the axis, spread over it; the last one right-aligned to the end.
  const ticks: string[] = [];
  const shown = Math.min(X_LABELS, points);
  for (let k = 0; k < shown; k++) {
    const i = shown === 1 ? 0 : Math.round((k * (points - 1)) / (shown - 1));
    const t = timeOf(i);
    const place =
      k === shown - 1 && shown > 1
        ? 'right:0'
        : `left:${((i / points) * 100).toFixed(1)}%${k > 0 ? ';transform:translateX(-50%)' : ''}`;
    ticks.push(
      `<time datetime="${t.toISOString()}" style="${place}">${escapeHtml(dateTick(t))}</time>`,
    );
  }
  const total = totals.reduce((a, b) => a + b, 0);
  const keys = [...series, ...(marked ? [{ label: marked.label, color: marked.color }] : [])];
  const legend = keys
    .map(
      (s) => `<span class="key"><i style="background:${s.color}"></i>${escapeHtml(s.label)}</span>`,
    )
    .join(' ');
  const span =
    (opts.stepMinutes ?? 1) === 1 ? `${points} min` : `${(points * stepMs) / 3_600_000} h`;
  const empty = total === 0 ? '<div class="empty">nothing in this window</div>' : '';

  return `<figure class="chart">
<figcaption>${escapeHtml(opts.title)} <span class="muted">(${total} in ${span}, UTC)</span> ${legend}</figcaption>
<div class="plot"><div class="ymax" title="the tallest bar">${max}</div>
<div class="area">
<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="${escapeHtml(opts.title)}" viewBox="0 0 ${VIEW_W} ${VIEW_H}" preserveAspectRatio="none">
${bars.join('\n')}
</svg>${empty}
<div class="xaxis">${ticks.join('')}</div>
</div></div>
</figure>`;
}
