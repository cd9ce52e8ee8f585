import { COMMITS_STATES } from './commits.ts';
import { count, duration, nextPoll, relative } from './format.ts';
import type { StatusReport } from './model.ts';
import { type SourceStatus, sourceLabel } from './sources.ts';

/** The status report as a terminal picture (bin/status): plain text, fixed-width columns. */

export function table(header: string[], rows: string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)];
}

/** "Gaps: 1 open (next fill in 12m), 4 filled, 0 unavailable; 1,234 pushes recovered". */
function gapsLine(report: StatusReport): string {
  const g = report.gaps;
  const next =
    g.byState.open > 0 && g.nextFillAt
      ? ` (next fill ${nextPoll(g.nextFillAt, report.generatedAt)})`
      : '';
  return `Gaps: ${g.byState.open} open${next}, ${g.byState.filled} filled, ${g.byState.unavailable} unavailable; ${count(g.eventsRecovered)} pushes recovered from the archive`;
}

/** "Last backfill: 2026-11-20-10 (gap:3) completed 5m ago: 1,000 pushes stored". */
function lastBackfillLine(report: StatusReport): string {
  const b = report.gaps.lastBackfill;
  if (!b) return 'Last backfill: never';
  const error = b.error ? `: ${b.error}` : '';
  return `Last backfill: ${b.file} (${b.scope}) ${b.state} ${relative(b.updatedAt, report.generatedAt)}: ${count(b.pushesCreated)} pushes stored, ${count(b.linesDone)} lines read${error}`;
}

/** One row per credential of the pool: what it may spend, what it spent, whether it is blocked. */
function credentialsTable(report: StatusReport): string[] {
  const now = report.generatedAt;
  return table(
    ['credential', 'quota', 'remaining', 'resets', 'poll', 'enrich', 'blocked'],
    report.credentials.map((c) => [
      c.label,
      String(c.quota),
      c.remaining === null ? '?' : String(c.remaining),
      relative(c.resetAt, now),
      `${c.spent.poll}/${c.allowance.poll}`,
      `${c.spent.enrich}/${c.allowance.enrich}`,
      c.blocked && c.blockedUntil
        ? c.blockReason === 'auth'
          ? `401${c.authBlock ? ` since ${c.authBlock.since.toISOString()}` : ''} until ${c.blockedUntil.toISOString()}${c.authBlock?.error ? ` (${c.authBlock.error})` : ''}`
          : `rate limit until ${c.blockedUntil.toISOString()}`
        : 'no',
    ]),
  ).map((line) => `  ${line}`);
}

function sourcesTable(report: StatusReport, sources: SourceStatus[]): string[] {
  const now = report.generatedAt;
  const out = table(
    [
      'id',
      'source',
      'mode',
      'enabled',
      'last run',
      'when',
      'next poll',
      'failures',
      'rejected 24h',
      'gaps 24h',
    ],
    sources.map((s) => [
      String(s.id),
      sourceLabel(s),
      s.mode,
      s.enabled ? 'yes' : 'no',
      s.lastRun?.status ?? '-',
      s.lastRun ? relative(s.lastRun.finishedAt ?? s.lastRun.startedAt, now) : 'never',
      s.enabled ? nextPoll(s.nextPollAt, now) : '-',
      String(s.consecutiveFailures),
      String(s.rejectedLast24h),
      String(s.gapsLast24h),
    ]),
  );
  for (const s of sources) {
    if (s.lastError) out.push(`  source ${s.id} last error: ${s.lastError}`);
  }
  return out;
}

/**
 * Sources at any count: one line of counts by state and kind, the worst and the latest when
 * there are more sources than the page shows, then the page (bin/status --sources N --page P).
 */
function sourcesText(report: StatusReport): string[] {
  const sum = report.sourceSummary;
  const p = report.sourcePage;
  const byState = Object.entries(sum.byState).map(([k, n]) => `${k} ${count(n)}`);
  const byKind = Object.entries(sum.byKind)
    .filter(([, n]) => n > 0)
    .map(([k, n]) => `${k} ${count(n)}`);
  const out = [
    `Sources: ${count(sum.total)} (${byState.join(', ')}); by kind: ${byKind.join(', ') || 'none'}`,
  ];
  // A small deployment's page already holds every source: no need to repeat them.
  const paged = p.total > report.sources.length || p.state !== null || p.kind !== null;
  if (paged && sum.mostFailing.length > 0) {
    out.push('', 'Most failing', ...sourcesTable(report, sum.mostFailing));
  }
  if (paged && sum.mostOverdue.length > 0) {
    out.push('', `Most overdue (next poll more than ${duration(sum.overdueAfterSeconds)} past)`);
    out.push(...sourcesTable(report, sum.mostOverdue));
  }
  if (paged && sum.latest.length > 0) {
    out.push('', 'Latest polled', ...sourcesTable(report, sum.latest));
  }
  if (p.perPage === 0) return out;
  const filter = [p.state && `state ${p.state}`, p.kind && `kind ${p.kind}`].filter(Boolean);
  out.push(
    '',
    `${filter.length ? `${filter.join(', ')}: ` : ''}page ${count(p.page)} of ${count(Math.max(1, p.pages))} (${count(p.total)} matching, ${p.perPage} a page${p.page < p.pages ? `; next: --page ${p.page + 1}` : ''})`,
  );
  if (report.sources.length === 0)
    out.push(sum.total === 0 ? '  no sources yet' : '  none on this page');
  else out.push(...sourcesTable(report, report.sources));
  return out;
}

/** Pushes by commits_state, then the fetch backlog and rate and what is stored (ADR 0070). */
function commitsLines(report: StatusReport): string[] {
  const c = report.commits;
  return [
    ...table([...COMMITS_STATES], [COMMITS_STATES.map((s) => count(c.byState[s]))]).map(
      (l) => `  ${l}`,
    ),
    `  ${count(c.pendingDue)} pushes due for fetching, ${count(c.requestsLastHour)} commits requests in the last hour, ${c.storedEstimated ? '~' : ''}${count(c.stored)} commits stored`,
    // Why new pushes get none, when none do (ADR 0112): one line an operator can act on.
    ...(c.off ? [`  commits are off: ${c.off}`] : []),
  ];
}

export function renderText(report: StatusReport): string {
  const now = report.generatedAt;
  const out: string[] = [`github-push-ingestor status at ${now.toISOString()}`, ''];

  const a = report.activity;
  out.push(
    `Pushes: ${count(a.pushes.total)} held (${count(a.pushes.poll)} polled, ${count(a.pushes.webhook)} by webhook, ${count(a.pushes.archive)} from the archive), ${count(a.pushes.last24h)} in the last 24h`,
    `Runs (24h): ${
      Object.entries(a.runsLast24h)
        .map(([status, n]) => `${status} ${n}`)
        .join(', ') || 'none'
    }; gaps (24h): ${a.gapsLast24h}`,
    `Rejected events: ${count(a.rejected.total)} set aside (${count(a.rejected.last24h)} new in 24h)${
      Object.keys(a.rejected.byReason).length
        ? `: ${Object.entries(a.rejected.byReason)
            .map(([reason, n]) => `${reason} ${n}`)
            .join(', ')}`
        : ''
    }`,
    gapsLine(report),
    lastBackfillLine(report),
    '',
    ...sourcesText(report),
  );

  out.push('', 'Commits', ...commitsLines(report));

  out.push('', 'Enrichment backlog');
  out.push(
    ...table(
      ['class', 'pending', 'due now', 'claimed', 'enriched', 'failed', 'gone'],
      Object.entries(report.enrichment).map(([cls, b]) => [
        cls,
        count(b.pending),
        count(b.due),
        count(b.claimed),
        count(b.enriched),
        count(b.failed),
        count(b.gone),
      ]),
    ),
  );

  out.push('', 'Request budget');
  const b = report.budget;
  if (b) {
    out.push(
      `  quota ${b.quota}/h, remaining ${b.remaining ?? 'unknown'}, resets ${relative(b.resetAt, now)}` +
        (b.blockedUntil && b.blockedUntil > now
          ? `, BLOCKED${b.blockReason === 'auth' ? ' (GitHub rejected the credential: 401)' : ''} until ${b.blockedUntil.toISOString()}`
          : ''),
      `  spent this window: poll ${b.spent.poll}/${b.allowance.poll}, enrich ${b.spent.enrich}/${b.allowance.enrich}`,
    );
  } else {
    out.push(`  unavailable: ${report.budgetError ?? 'unknown error'}`);
  }
  if (report.credentials.length > 0) out.push('', 'Credentials', ...credentialsTable(report));

  out.push('', 'Queues');
  if (report.queues) {
    out.push(
      ...table(
        ['queue', 'waiting', 'active', 'completed', 'failed', 'oldest waiting'],
        report.queues.map((q) => [
          q.name,
          String(q.jobs.created + q.jobs.retry),
          String(q.jobs.active),
          String(q.jobs.completed),
          String(q.jobs.failed),
          q.oldestWaitingSeconds === null ? '-' : duration(q.oldestWaitingSeconds),
        ]),
      ),
    );
    const r = report.lastReconcile;
    out.push(
      `  last reconcile: ${r ? `${r.state} ${relative(r.completedAt ?? r.startedAt, now)}` : 'never'}`,
    );
  } else {
    out.push(`  ${report.queuesError}`);
  }

  out.push('', 'Webhooks');
  if (report.webhooksEnabled) {
    const w = a.webhooks;
    const routed = Object.entries(w.last24h)
      .map(([routing, n]) => `${routing} ${n}`)
      .join(', ');
    out.push(
      `  enabled; last delivery ${relative(w.lastReceivedAt, now)}; 24h: ${routed || 'none'}` +
        (w.mismatchedRedeliveries24h
          ? `; ${w.mismatchedRedeliveries24h} redelivery(ies) with a different body`
          : ''),
    );
  } else {
    out.push('  disabled (WEBHOOK_SECRET is not set)');
  }
  return `${out.join('\n')}\n`;
}
