import { escapeHtml } from './html.ts';

/**
 * A small inline SVG bar chart (stacked when given several series): no script, no external
 * asset, readable at a glance. One bar per minute (or per `stepMinutes`); the y axis is
 * labelled with its maximum. `marked` shades the points it flags (open gaps on the
 * coverage chart), so a hole reads as a hole even when its bar is empty.
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
  width?: number;
  height?: number;
  /** Points to shade behind the bars, with what the shading means. */
  marked?: { label: string; color: string; at: boolean[] };
}

const PAD = { left: 40, right: 8, top: 10, bottom: 22 };

function hhmm(d: Date): string {
  return d.toISOString().slice(11, 16);
}

export function barChart(series: ChartSeries[], opts: ChartOptions): string {
  const width = opts.width ?? 560;
  const height = opts.height ?? 150;
  const points = Math.max(1, ...series.map((s) => s.values.length));
  const totals = Array.from({ length: points }, (_, i) =>
    series.reduce((sum, s) => sum + (s.values[i] ?? 0), 0),
  );
  const max = Math.max(1, ...totals);
  const plotW = width - PAD.left - PAD.right;
  const plotH = height - PAD.top - PAD.bottom;
  const step = plotW / points;
  const barW = Math.max(1, step - (step > 3 ? 1 : 0));
  const y = (v: number) => PAD.top + plotH - (v / max) * plotH;
  const stepMs = (opts.stepMinutes ?? 1) * 60_000;
  const at = (i: number) => hhmm(new Date(opts.start.getTime() + i * stepMs));

  const bars: string[] = [];
  const marked = opts.marked;
  if (marked) {
    for (let i = 0; i < points; i++) {
      if (!marked.at[i]) continue;
      bars.push(
        `<rect class="mark" x="${(PAD.left + i * step).toFixed(1)}" y="${PAD.top}" width="${step.toFixed(1)}" height="${plotH}" fill="${marked.color}" fill-opacity="0.18"><title>${at(i)} ${escapeHtml(marked.label)}</title></rect>`,
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
        `<rect x="${(PAD.left + i * step).toFixed(1)}" y="${top.toFixed(1)}" width="${barW.toFixed(1)}" height="${Math.max(h, 0.5).toFixed(1)}" fill="${s.color}"><title>${at(i)} ${escapeHtml(s.label)}: ${v}</title></rect>`,
      );
      base += v;
    }
  }

  // Time ticks: start, every hour-ish, and the current minute.
  const ticks: string[] = [];
  const tickEvery = Math.max(1, Math.round(points / 4));
  for (let i = 0; i < points; i += tickEvery) {
    const x = PAD.left + i * step;
    ticks.push(`<text x="${x.toFixed(1)}" y="${height - 6}" class="tick">${at(i)}</text>`);
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
  const empty =
    total === 0
      ? `<text x="${PAD.left + plotW / 2}" y="${PAD.top + plotH / 2}" text-anchor="middle" class="empty">nothing in this window</text>`
      : '';

  return `<figure class="chart">
<figcaption>${escapeHtml(opts.title)} <span class="muted">(${total} in ${span}, UTC)</span> ${legend}</figcaption>
<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="${escapeHtml(opts.title)}" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}">
<line x1="${PAD.left}" y1="${PAD.top + plotH}" x2="${width - PAD.right}" y2="${PAD.top + plotH}" class="axis"/>
<line x1="${PAD.left}" y1="${PAD.top}" x2="${PAD.left}" y2="${PAD.top + plotH}" class="axis"/>
<text x="${PAD.left - 4}" y="${PAD.top + 8}" text-anchor="end" class="tick">${max}</text>
<text x="${PAD.left - 4}" y="${PAD.top + plotH}" text-anchor="end" class="tick">0</text>
${bars.join('\n')}
${ticks.join('\n')}
${empty}
</svg>
</figure>`;
}
