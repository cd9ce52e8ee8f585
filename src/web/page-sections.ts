import { count, relative, spendParts, windowParts } from '../status/format.ts';
import type { CredentialStatus, StatusReport } from '../status/model.ts';
import { bytesText } from '../status/render-text.ts';
import { sourceLabel } from '../status/sources.ts';
import { dateTick } from './chart.ts';
import { escapeHtml as e } from './html.ts';

/**
 * The page's tables beside the sources (src/web/page.ts): the credentials, the archive
 * mirrors and what each added, the open gaps. Each scrolls sideways in its own box on a
 * narrow screen, so the page itself never does.
 */

/** The deployment's credentials, one row each (labels only: a token's fingerprint, an installation id). */
export function credentialsSection(report: StatusReport): string {
  const now = report.generatedAt;
  if (report.credentials.length === 0) return '';
  const rows = report.credentials
    .map((c) => {
      const blocked = c.blocked
        ? `<span class="pill ${c.blockReason === 'auth' ? 'bad' : 'warn'}">${c.blockReason === 'auth' ? '401' : 'rate limit'} until ${e(relative(c.blockedUntil, now).replace('in ', ''))}</span>`
        : 'no';
      const parts = spendParts(c);
      return `<tr><td><code>${e(c.label)}</code></td><td class="num">${count(c.quota)}</td><td class="num">${c.remaining === null ? '?' : count(c.remaining)}</td><td>${e(relative(c.resetAt, now))}</td><td class="num">${e(parts.poll)}</td><td class="num">${count(c.spent.enrich)}</td><td class="num">${count(c.spent.commits)}</td><td class="num">${e(parts.background)}</td><td>${graphqlCell(c.graphql, now)}</td><td>${blocked}</td></tr>`;
    })
    .join('\n');
  return `<section id="credentials-section"><h2>Credentials <span class="muted">(${report.credentials.length}: the deployment's, as the database knows them)</span></h2>
<div class="scroll"><table id="credentials"><thead><tr><th>credential</th><th class="num">quota</th><th class="num">remaining</th><th>resets</th><th class="num">poll spent</th><th class="num">enrich spent</th><th class="num">commits spent</th><th class="num" title="enrich + commits: they share this allowance">background</th><th title="the credential's GraphQL points window: commits' own">GraphQL points</th><th>blocked</th></tr></thead>
<tbody>${rows}</tbody></table></div></section>`;
}

/** A credential's GraphQL window: spent of its quota, what is left, the reset, a block. */
function graphqlCell(g: CredentialStatus['graphql'], now: Date): string {
  if (!g) return '<span class="muted">none</span>';
  const block = g.blocked
    ? ` <span class="pill ${g.blocked.reason === 'auth' ? 'bad' : 'warn'}">${g.blocked.reason === 'auth' ? '401' : 'rate limit'} until ${e(relative(g.blocked.until, now).replace('in ', ''))}</span>`
    : '';
  // Parts that add up to the quota (windowParts): GitHub's count beyond the ledger is elsewhere's.
  const w = windowParts(g);
  const elsewhere = w.elsewhere > 0 ? `${count(w.elsewhere)} spent elsewhere, ` : '';
  return `${count(w.spent)}/${count(g.quota)} <span class="muted">(${elsewhere}${count(w.left)} left, resets ${e(relative(g.resetAt, now))})</span>${block}`;
}

/** The archive mirrors configured or read, and what each added (docs/mirrors.md). */
export function mirrorsSection(report: StatusReport): string {
  const now = report.generatedAt;
  const rows = report.mirrors
    .map(
      (m) =>
        `<tr><td><code>${e(m.mirror || '(local files)')}</code>${m.configured ? '' : ' <span class="muted">(not in GHARCHIVE_URL here)</span>'}</td><td class="num">${count(m.hoursImported)}</td><td class="num">${count(m.hoursMissing)}</td><td class="num">${count(m.hoursFailed)}</td><td class="num">${count(m.pushesAdded)}</td><td>${e(relative(m.lastReadAt, now))}</td></tr>`,
    )
    .join('\n');
  return `<h3>Mirrors <span class="muted">(${report.mirrors.length})</span></h3>
<div class="scroll"><table id="mirrors"><thead><tr><th>mirror</th><th class="num">hours read</th><th class="num">hours missing</th><th class="num">failed</th><th class="num">pushes added</th><th>last read</th></tr></thead>
<tbody>${rows || '<tr><td colspan="6" class="muted">none configured or read</td></tr>'}</tbody></table></div>`;
}

/** The open gaps: which source, which window (UTC), why still open. */
export function openGapsSection(report: StatusReport): string {
  const g = report.gaps;
  const now = report.generatedAt;
  const rows = g.open
    .map(
      (x) =>
        `<tr><td class="num">${x.id}</td><td>${e(sourceLabel(x.source))} <span class="muted">(${x.sourceId})</span></td><td><time datetime="${x.fromAt.toISOString()}">${e(dateTick(x.fromAt))}</time> – <time datetime="${x.toAt.toISOString()}">${e(dateTick(x.toAt))}</time></td><td class="num">${x.attempts}</td><td>${e(relative(x.nextAttemptAt, now))}</td><td>${x.lastError ? `<span class="err">${e(x.lastError)}</span>` : '-'}</td></tr>`,
    )
    .join('\n');
  const more =
    g.byState.open > g.open.length
      ? `<p class="muted">and ${count(g.byState.open - g.open.length)} more (bin/status --json, or the gaps table)</p>`
      : '';
  return `<h3>Open gaps <span class="muted">(${count(g.byState.open)})</span></h3>
<div class="scroll"><table id="open-gaps"><thead><tr><th class="num">gap</th><th>source</th><th>window (UTC)</th><th class="num">attempts</th><th>next fill</th><th>last error</th></tr></thead>
<tbody>${rows || '<tr><td colspan="6" class="muted">none: every recorded gap is filled or unavailable</td></tr>'}</tbody></table></div>${more}`;
}

/** Months of pushes held, exported and dropped (HISTORY_MONTHS), each with its bytes. */
export function historySection(report: StatusReport): string {
  const h = report.history;
  const t = h.totals;
  const rows = h.months
    .map(
      (m) =>
        `<tr><td>${e(m.month)}</td><td><span class="pill ${m.state === 'dropped' ? 'muted' : m.state === 'exported' ? 'ok' : ''}">${e(m.state)}</span></td><td class="num">${e(bytesText(m.bytes))}</td><td class="num">${m.pushes === null ? '-' : count(m.pushes)}</td><td>${e(m.state === 'kept' ? (m.reason ?? '') : (m.exportedTo ?? ''))}</td></tr>`,
    )
    .join('\n');
  const policy =
    h.historyMonths === null
      ? 'every month kept: HISTORY_MONTHS is unset'
      : `keeping ${e(h.firstKept ?? '')} and later; older months are dropped once verified in ${e(h.places.join(', '))}`;
  return `<h3>History <span class="muted">(${policy})</span></h3>
<p class="muted">${t.kept.months} kept (${e(bytesText(t.kept.bytes))}), ${t.exported.months} exported and held (${e(bytesText(t.exported.bytes))}), ${t.dropped.months} dropped (${e(bytesText(t.dropped.bytes))} freed)</p>
<div class="scroll"><table id="history"><thead><tr><th>month</th><th>state</th><th class="num">bytes</th><th class="num">pushes</th><th>where exported / why kept</th></tr></thead>
<tbody>${rows || '<tr><td colspan="5" class="muted">no month partition yet</td></tr>'}</tbody></table></div>`;
}
