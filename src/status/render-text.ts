import type { GraphQLBudget } from '../budget/types.ts';
import { COMMITS_STATES } from '../platform/db/columns.ts';
import type { BackgroundReading } from '../work/split.ts';
import { count, duration, nextPoll, relative, spendParts, windowParts } from './format.ts';
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

/** The open gaps (oldest window first): which source, which window, why still open. */
function openGapsLines(report: StatusReport): string[] {
  const g = report.gaps;
  if (g.open.length === 0) return [];
  const rows = table(
    ['gap', 'source', 'from (UTC)', 'to (UTC)', 'attempts', 'next fill', 'last error'],
    g.open.map((x) => [
      String(x.id),
      `${sourceLabel(x.source)} (${x.sourceId})`,
      x.fromAt.toISOString().slice(0, 16).replace('T', ' '),
      x.toAt.toISOString().slice(0, 16).replace('T', ' '),
      String(x.attempts),
      relative(x.nextAttemptAt, report.generatedAt),
      x.lastError ?? '-',
    ]),
  ).map((l) => `  ${l}`);
  const more = g.byState.open - g.open.length;
  return [...rows, ...(more > 0 ? [`  and ${count(more)} more`] : [])];
}

/** The archive mirrors configured here or read by any process, and what each added. */
function mirrorsLines(report: StatusReport): string[] {
  if (report.mirrors.length === 0) return [];
  return [
    'Mirrors:',
    ...table(
      ['mirror', 'hours read', 'missing', 'failed', 'pushes added', 'last read'],
      report.mirrors.map((m) => [
        `${m.mirror || '(local files)'}${m.configured ? '' : ' (not in GHARCHIVE_URL here)'}`,
        count(m.hoursImported),
        count(m.hoursMissing),
        count(m.hoursFailed),
        count(m.pushesAdded),
        relative(m.lastReadAt, report.generatedAt),
      ]),
    ).map((l) => `  ${l}`),
  ];
}

/** "Last backfill: 2026-11-20-10 (gap:3) completed 5m ago: 1,000 pushes stored". */
/** `1.5 GiB`, `12.0 MiB`, `800 kB`: a partition's size. */
export function bytesText(n: number | null): string {
  if (n === null) return '?';
  if (n >= 1024 ** 3) return `${(n / 1024 ** 3).toFixed(1)} GiB`;
  if (n >= 1024 ** 2) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${Math.round(n / 1024)} kB`;
}

/** Months held, exported and dropped (HISTORY_MONTHS), each with its bytes. */
function historyLines(report: StatusReport): string[] {
  const h = report.history;
  const t = h.totals;
  const policy =
    h.historyMonths === null
      ? 'every month kept (HISTORY_MONTHS unset)'
      : `keeping ${h.firstKept} and later (HISTORY_MONTHS=${h.historyMonths}), older months verified in ${h.places.join(', ')} before they are dropped`;
  const lines = [
    `History: ${policy}; ${t.kept.months} months kept (${bytesText(t.kept.bytes)}), ${t.exported.months} exported and held (${bytesText(t.exported.bytes)}), ${t.dropped.months} dropped (${bytesText(t.dropped.bytes)} freed)`,
  ];
  if (h.months.length === 0) return lines;
  lines.push(
    ...table(
      ['month', 'state', 'bytes', 'pushes', 'where / why'],
      h.months.map((m) => [
        m.month,
        m.state,
        bytesText(m.bytes),
        m.pushes === null ? '-' : count(m.pushes),
        m.state === 'kept' ? (m.reason ?? '') : (m.exportedTo ?? ''),
      ]),
    ),
  );
  return lines;
}

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
    [
      'credential',
      'quota',
      'remaining',
      'resets',
      'poll',
      'enrich',
      'commits',
      'background',
      'graphql',
      'blocked',
    ],
    report.credentials.map((c) => [
      c.label,
      String(c.quota),
      c.remaining === null ? '?' : String(c.remaining),
      relative(c.resetAt, now),
      spendParts(c).poll,
      String(c.spent.enrich),
      String(c.spent.commits),
      spendParts(c).background,
      c.graphql
        ? `${count(c.graphql.spent)}/${count(c.graphql.quota)}${c.graphql.blocked ? ' blocked' : ''}`
        : '-',
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

/** Pushes by commits_state, then the fetch backlog and rate and what is stored. */
function commitsLines(report: StatusReport): string[] {
  const c = report.commits;
  return [
    ...table([...COMMITS_STATES], [COMMITS_STATES.map((s) => count(c.byState[s]))]).map(
      (l) => `  ${l}`,
    ),
    `  ${count(c.pendingDue)} pushes due for fetching, ${count(c.requestsLastHour)} commits requests in the last hour, ${c.storedEstimated ? '~' : ''}${count(c.stored)} commits stored`,
    `  backlog by origin: ${Object.entries(c.pendingByOrigin)
      .map(([o, n]) => `${o} ${count(n)}`)
      .join(', ')}`,
    ...graphqlLine(report),
    // Why new pushes get none, when none do: one line an operator can act on.
    ...(c.off ? [`  commits are off: ${c.off}`] : []),
    ...(c.awaitingCredential > 0
      ? [
          `  ${count(c.awaitingCredential)} pushes wait for a credential: a worker with one fetches them, newest first, when nothing else is due`,
        ]
      : []),
  ];
}

/** The GraphQL points window of the deployment (commits' own budget). */
function graphqlLine(report: StatusReport): string[] {
  const g = report.budget?.graphql;
  if (!g)
    return [
      '  GraphQL: no credential with a GraphQL window (anonymous: commits over GraphQL need one)',
    ];
  return [`  GraphQL points: ${graphqlText(g, report.generatedAt)}`, pushesPerPointLine(report)];
}

/** "GraphQL, last hour: 520 pushes settled for 20 points: 26 pushes a point". */
function pushesPerPointLine(report: StatusReport): string {
  const x = report.commits.graphql;
  const ratio = x.pushesPerPoint === null ? 'no point spent' : `${x.pushesPerPoint} pushes a point`;
  return `  GraphQL, last hour: ${count(x.pushes)} pushes settled for ${count(x.points)} points: ${ratio}`;
}

/**
 * "12/5,000 spent, 4,988 left, resets in 40m" (or "12/5,000 spent, 900 spent elsewhere,
 * 4,088 left, …", "... blocked (rate limit) until …"): parts that add up to the quota
 * (windowParts).
 */
export function graphqlText(g: GraphQLBudget, now: Date): string {
  const blocked = g.blocked
    ? `, blocked (${g.blocked.reason === 'auth' ? '401' : 'rate limit'}) until ${g.blocked.until.toISOString()}`
    : '';
  const w = windowParts(g);
  const elsewhere = w.elsewhere > 0 ? `${count(w.elsewhere)} spent elsewhere, ` : '';
  return `${count(w.spent)}/${count(g.quota)} spent, ${elsewhere}${count(w.left)} left, resets ${relative(g.resetAt, now)}${blocked}`;
}

/**
 * The background allowance between enrichment and commits: each side's floor,
 * what it spent, what its floor lent the other, and whether it waits for REST now.
 */
function backgroundLines(g: BackgroundReading): string[] {
  const row = (side: 'enrich' | 'commits') => [
    side,
    count(g.floors[side]),
    count(g.spent[side]),
    count(g.lent[side]),
    g.waiting[side] ? 'yes' : 'no',
    count(g.room[side]),
  ];
  return [
    `  background ${count(g.allowance)} this window, shares are floors: what a side leaves unused while it waits for nothing, the other may spend`,
    ...table(
      ['purpose', 'floor', 'spent', 'lent', 'waits', 'may spend'],
      [row('enrich'), row('commits')],
    ).map((l) => `  ${l}`),
  ];
}

export function renderText(report: StatusReport): string {
  const now = report.generatedAt;
  const out: string[] = [`github-push-ingestor status at ${now.toISOString()}`, ''];

  const a = report.activity;
  out.push(
    `Pushes: ${count(a.pushes.total)} held (${count(a.pushes.poll)} polled, ${count(a.pushes.webhook)} by webhook, ${count(a.pushes.archive)} from the archive); in the last 24h ${count(a.pushes.pushedLast24h)} pushed, ${count(a.pushes.last24h)} arrived`,
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
    ...openGapsLines(report),
    lastBackfillLine(report),
    ...mirrorsLines(report),
    ...historyLines(report),
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
      `  spent this window: poll ${spendParts(b).poll}; enrich ${count(b.spent.enrich)} + commits ${count(b.spent.commits)} = ${spendParts(b).background} (they share the background allowance)`,
    );
  } else {
    out.push(`  unavailable: ${report.budgetError ?? 'unknown error'}`);
  }
  if (report.background) out.push(...backgroundLines(report.background));
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
