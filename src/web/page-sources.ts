import { count, duration, nextPoll, relative } from '../status/format.ts';
import type { StatusReport } from '../status/model.ts';
import { type SourceStatus, sourceLabel } from '../status/sources.ts';
import { escapeHtml as e } from './html.ts';

/**
 * The page's sources (src/web/page.ts): readable at 10,000 — counts by state and kind, the
 * worst and the latest in full, one page of the chosen ones. Each table scrolls sideways in
 * its own box on a narrow screen, so the page itself never does.
 */

function sourceRow(s: SourceStatus, now: Date): string {
  const run = s.lastRun;
  const status = run
    ? `<span class="pill ${run.status === 'failed' || run.status === 'interrupted' ? 'bad' : run.status === 'running' ? 'warn' : 'ok'}">${e(run.status)}</span>`
    : '<span class="muted">never run</span>';
  const error = s.lastError ? `<div class="err">${e(s.lastError)}</div>` : '';
  return `<tr>
<td class="num">${s.id}</td>
<td>${e(sourceLabel(s))}${error}</td>
<td>${e(s.mode)}</td>
<td>${s.enabled ? 'yes' : '<span class="muted">no</span>'}</td>
<td>${status}</td>
<td>${e(run ? relative(run.finishedAt ?? run.startedAt, now) : '-')}</td>
<td>${e(s.enabled ? nextPoll(s.nextPollAt, now) : '-')}</td>
<td class="num">${e(duration(s.pollIntervalSeconds))}</td>
<td class="num">${s.consecutiveFailures}</td>
<td class="num">${count(s.eventsCreatedLast24h)}</td>
<td class="num">${count(s.rejectedLast24h)}</td>
<td class="num">${s.gapsLast24h}</td>
</tr>`;
}

const SOURCE_HEAD = `<thead><tr><th class="num">id</th><th>source</th><th>mode</th><th>enabled</th><th>last run</th><th>when</th><th>next poll</th><th class="num">interval</th><th class="num">failures</th><th class="num">events 24h</th><th class="num">rejected 24h</th><th class="num">gaps 24h</th></tr></thead>`;

/** A link to another view of the sources, keeping what the others do not change. */
function sourcesHref(p: StatusReport['sourcePage'], change: Record<string, string | null>): string {
  const q = new URLSearchParams();
  const merged: Record<string, string | null> = {
    sources: p.perPage === 50 ? null : String(p.perPage),
    page: p.page === 1 ? null : String(p.page),
    state: p.state,
    kind: p.kind,
    ...change,
  };
  // The defaults stay out of the address: page 1 of 50 is plain "/".
  const defaults: Record<string, string> = { sources: '50', page: '1' };
  for (const [k, v] of Object.entries(merged)) if (v !== null && v !== defaults[k]) q.set(k, v);
  const qs = q.toString();
  return qs ? `/?${qs}` : '/';
}

/**
 * Sources readable at 10,000: counts by state and kind (each a link to those sources), the
 * worst and the latest in full, then one page of the chosen ones with links to the others.
 */
export function sourcesSections(report: StatusReport): string {
  const now = report.generatedAt;
  const sum = report.sourceSummary;
  const p = report.sourcePage;
  const link = (label: string, n: number, change: Record<string, string | null>) =>
    `<a href="${e(sourcesHref(p, { ...change, page: null }))}">${e(label)}</a> ${count(n)}`;
  const states = Object.entries(sum.byState)
    .map(([k, n]) => link(k, n, { state: k, kind: null }))
    .join(' · ');
  const kinds = Object.entries(sum.byKind)
    .filter(([, n]) => n > 0)
    .map(([k, n]) => link(k, n, { kind: k, state: null }))
    .join(' · ');
  const highlight = (id: string, title: string, rows: SourceStatus[], none: string) =>
    `<h3>${e(title)}</h3><div class="scroll"><table id="${id}">${SOURCE_HEAD}<tbody>${rows.map((s) => sourceRow(s, now)).join('\n') || `<tr><td colspan="12" class="muted">${e(none)}</td></tr>`}</tbody></table></div>`;
  const filter = [p.state && `state ${p.state}`, p.kind && `kind ${p.kind}`].filter(Boolean);
  const nav = [
    p.page > 1
      ? `<a href="${e(sourcesHref(p, { page: String(p.page - 1) }))}" rel="prev">← previous</a>`
      : '',
    p.page < p.pages
      ? `<a href="${e(sourcesHref(p, { page: String(p.page + 1) }))}" rel="next">next →</a>`
      : '',
    filter.length ? `<a href="/">all sources</a>` : '',
  ]
    .filter(Boolean)
    .join(' · ');
  return `<section><h2>Sources <span class="muted">(${count(sum.total)})</span></h2>
<p id="source-summary">${states}<br><span class="muted">by kind:</span> ${kinds || 'none'}</p>
${sum.total > 0 ? highlight('sources-failing', 'Most failing', sum.mostFailing, 'none: no enabled source is failing') : ''}
${sum.total > 0 ? highlight('sources-overdue', `Most overdue: next poll more than ${duration(sum.overdueAfterSeconds)} past`, sum.mostOverdue, 'none: every enabled source is polled on time') : ''}
${sum.total > 0 ? highlight('sources-latest', 'Latest polled', sum.latest, 'none polled yet') : ''}
<h3>${filter.length ? `${e(filter.join(', '))}: ` : 'All: '}page ${count(p.page)} of ${count(Math.max(1, p.pages))} <span class="muted">(${count(p.total)} matching, ${p.perPage} a page)</span></h3>
<div class="scroll"><table id="sources">${SOURCE_HEAD}
<tbody>${report.sources.map((s) => sourceRow(s, now)).join('\n') || `<tr><td colspan="12" class="muted">${sum.total === 0 ? 'No sources yet: bin/sources add public, or bin/sources import FILE' : 'No sources on this page'}</td></tr>`}</tbody></table></div>
<p class="muted" id="source-pages">${nav}</p></section>`;
}
