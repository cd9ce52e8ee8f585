import type { CoverageHour } from './coverage.ts';
import { count } from './format.ts';
import { table } from './render-text.ts';

/** bin/status --coverage: one line per UTC hour, oldest first, then the window's totals. */
export function renderCoverage(rows: CoverageHour[]): string {
  const hour = (d: Date) => `${d.toISOString().slice(0, 13).replace('T', ' ')}:00`;
  const sum = (f: (r: CoverageHour) => number) => rows.reduce((n, r) => n + f(r), 0);
  const lines = table(
    ['hour (UTC)', 'pushes', 'poll', 'webhook', 'archive', 'gaps open', 'mirrors read'],
    rows.map((r) => [
      hour(r.hour),
      count(r.pushes),
      count(r.poll),
      count(r.webhook),
      count(r.archive),
      r.gapsOpen ? String(r.gapsOpen) : '-',
      String(r.mirrorsRead),
    ]),
  );
  const total = sum((r) => r.pushes);
  const share = (n: number) => (total ? ` (${Math.round((n / total) * 100)}%)` : '');
  const open = rows.filter((r) => r.gapsOpen > 0).length;
  lines.push(
    '',
    `${rows.length} hours: ${count(total)} pushes: ${count(sum((r) => r.poll))} polled${share(sum((r) => r.poll))}, ${count(sum((r) => r.webhook))} by webhook${share(sum((r) => r.webhook))}, ${count(sum((r) => r.archive))} from the archive${share(sum((r) => r.archive))}; ${open} hours with an open gap`,
  );
  return `${lines.join('\n')}\n`;
}
