import type { GraphQLBudget } from '../budget/types.ts';
import { NO_CREDENTIAL_IN_USE } from '../commits/deployment.ts';
import {
  COMMITS_STATES,
  PUSH_ORIGINS,
  REQUEST_PURPOSES,
  type RequestPurpose,
} from '../platform/db/columns.ts';
import type { CoverageHour } from '../status/coverage.ts';
import { count, duration, nextPoll, relative, spendParts, windowParts } from '../status/format.ts';
import type { StatusReport } from '../status/model.ts';
import type { MinuteSeries } from '../status/series.ts';
import type { BackgroundReading } from '../work/split.ts';
import { barChart } from './chart.ts';
import { escapeHtml as e } from './html.ts';
import {
  credentialsSection,
  historySection,
  mirrorsSection,
  openGapsSection,
} from './page-sections.ts';
import { sourcesSections } from './page-sources.ts';

/**
 * GET /: the status report as a page a person would rather look at than read. Server-
 * rendered, one request, no script and no external asset (it must work on an air-gapped
 * host and behind any proxy); it refreshes itself every 30 seconds.
 */

/** A colour per request purpose (the Record keeps it complete when a purpose is added). */
const PURPOSE_COLORS: Record<RequestPurpose, string> = {
  poll: '#8250df',
  enrich: '#bf8700',
  commits: '#1a7f37',
};

const CSS = `
:root { --fg:#1d2330; --muted:#667085; --line:#e4e7ec; --bg:#f7f8fa; --ok:#1a7f37; --warn:#9a6700; --bad:#cf222e; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color:var(--fg); background:var(--bg); }
header { padding:16px 24px; background:#fff; border-bottom:1px solid var(--line); display:flex; align-items:center; gap:16px; flex-wrap:wrap; }
header h1 { font-size:18px; margin:0; }
main { padding:16px 24px 32px; max-width:1240px; }
.muted { color:var(--muted); font-weight:normal; }
.pill { display:inline-block; padding:2px 10px; border-radius:999px; font-weight:600; font-size:12px; }
.pill.ok { background:#dafbe1; color:var(--ok); } .pill.warn { background:#fff8c5; color:var(--warn); } .pill.bad { background:#ffebe9; color:var(--bad); }
.cards { display:grid; grid-template-columns:repeat(auto-fit, minmax(220px, 1fr)); gap:12px; margin-bottom:16px; }
.card { background:#fff; border:1px solid var(--line); border-radius:8px; padding:12px 14px; }
.card h2 { font-size:12px; text-transform:uppercase; letter-spacing:.04em; color:var(--muted); margin:0 0 6px; }
.big { font-size:24px; font-weight:600; }
/* A row is its label floated left and its value as wide as its text, right-aligned: beside
   the label when both fit, else on a line of its own under it. A value never breaks inside a
   word or number: a short one never wraps, a long one (.phrases) only between its phrases. */
.card dl { display:flow-root; margin:6px 0 0; }
.card dt { float:left; clear:both; max-width:100%; margin:0 12px 2px 0; color:var(--muted); }
.card dd { display:flow-root; width:max-content; max-width:100%; margin:0 0 2px auto; text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; overflow:hidden; text-overflow:ellipsis; }
.card dd.phrases { white-space:normal; } .card dd.phrases > span { white-space:nowrap; }
.card .off { margin:8px 0 0; color:var(--warn); font-size:12px; }
section { background:#fff; border:1px solid var(--line); border-radius:8px; padding:12px 14px; margin-bottom:16px; }
section h2 { font-size:15px; margin:0 0 8px; }
section h3 { font-size:13px; margin:14px 0 6px; }
table { border-collapse:collapse; width:100%; font-variant-numeric:tabular-nums; }
th, td { text-align:left; padding:6px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
th { font-size:12px; color:var(--muted); font-weight:600; }
td.num, th.num { text-align:right; }
.err { color:var(--bad); font-size:12px; }
.charts { display:flex; flex-wrap:wrap; gap:24px; }
figure.chart { margin:0; flex:1 1 460px; min-width:0; }
figcaption { font-weight:600; margin-bottom:4px; }
.key { white-space:nowrap; font-weight:normal; font-size:12px; margin-left:8px; color:var(--muted); }
.key i { display:inline-block; width:10px; height:10px; border-radius:2px; margin-right:4px; vertical-align:-1px; }
.plot { display:flex; gap:6px; align-items:flex-start; }
.ymax { font-size:12px; color:var(--muted); min-width:2em; text-align:right; font-variant-numeric:tabular-nums; }
.area { position:relative; flex:1 1 auto; min-width:0; }
figure.chart svg { width:100%; height:140px; display:block; border-left:1px solid #98a2b3; border-bottom:1px solid #98a2b3; }
.xaxis { position:relative; height:20px; font-size:12px; color:var(--muted); }
.xaxis time { position:absolute; top:3px; white-space:nowrap; }
.empty { position:absolute; left:0; right:0; top:0; height:140px; display:flex; align-items:center; justify-content:center; color:var(--muted); font-size:12px; }
.scroll { overflow-x:auto; max-width:100%; }
footer { color:var(--muted); font-size:12px; padding:0 24px 24px; }
@media (max-width: 600px) {
  header { padding:12px; }
  main { padding:12px 12px 24px; }
  footer { padding:0 12px 16px; }
  section { padding:10px; }
  figure.chart { flex-basis:100%; }
  .cards { grid-template-columns:repeat(auto-fit, minmax(160px, 1fr)); gap:8px; }
  .card { padding:10px; }
  .key { margin-left:4px; }
}
`;

// Inline, so the browser's automatic /favicon.ico request never happens (and never 404s).
const FAVICON = `data:image/svg+xml,${encodeURIComponent(
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#2f81f7"/><path d="M3 11h2V7H3zm4 0h2V4H7zm4 0h2V8h-2z" fill="#fff"/></svg>',
)}`;

type Health = { level: 'ok' | 'warn' | 'bad'; text: string };

function health(report: StatusReport): Health {
  const now = report.generatedAt;
  const sum = report.sourceSummary;
  const enabled = sum.total - sum.byState.disabled;
  const failing = sum.byState.failing;
  const blocked = report.budget?.blockedUntil && report.budget.blockedUntil > now;
  if (enabled > 0 && failing === enabled) {
    return { level: 'bad', text: 'every enabled source is failing' };
  }
  if (!report.queues) return { level: 'bad', text: 'queues not installed' };
  const problems: string[] = [];
  if (failing) problems.push(`${failing} source(s) failing`);
  if (report.activity.gapsLast24h) problems.push(`${report.activity.gapsLast24h} gap(s) in 24h`);
  if (report.activity.rejected.last24h) {
    problems.push(`${report.activity.rejected.last24h} event(s) set aside in 24h`);
  }
  if (blocked)
    problems.push(
      report.budget?.blockReason === 'auth'
        ? 'GitHub rejected the credentials (401)'
        : 'rate limited',
    );
  const someBlocked = report.credentials.filter((c) => c.blocked);
  if (!blocked && someBlocked.length > 0) {
    problems.push(`${someBlocked.length} of ${report.credentials.length} credentials blocked`);
  }
  // Commits off for want of a credential is a fault to fix; off because no source asks is a choice.
  if (report.commits.off === NO_CREDENTIAL_IN_USE)
    problems.push('commits off: no GitHub credential');
  if (problems.length) return { level: 'warn', text: problems.join(', ') };
  return { level: 'ok', text: enabled ? 'healthy' : 'no enabled sources' };
}

/**
 * A card row: its label and value, and optionally the whole value as the tooltip (of a
 * shortened one). A value is one short text that never wraps, or phrases (a long value): it
 * wraps between them, never inside one.
 */
type CardValue = string | readonly string[];
type CardRow = [string, CardValue] | [string, CardValue, string];

function cardValue(v: CardValue, full: string | undefined): string {
  const title = full ? ` title="${e(full)}"` : '';
  if (typeof v === 'string') return `<dd${title}>${e(v)}</dd>`;
  return `<dd class="phrases"${title}>${v.map((x) => `<span>${e(x)}</span>`).join(' ')}</dd>`;
}

function card(title: string, big: string, rows: CardRow[], id?: string, note?: string): string {
  return `<div class="card"${id ? ` id="${id}"` : ''}><h2>${e(title)}</h2><div class="big">${e(big)}</div><dl>${rows
    .map(([k, v, full]) => `<dt>${e(k)}</dt>${cardValue(v, full)}`)
    .join('')}</dl>${note ? `<p class="off">${e(note)}</p>` : ''}</div>`;
}

/** The most of a file name a card shows: a phone's card holds about 20 characters a line. */
const FILE_SHOWN = 18;

/**
 * A local file's path as its name without the GH Archive extension ("2026-11-29-8"), at most
 * FILE_SHOWN characters (its end kept, where the hour is); the whole path is the tooltip.
 */
function shortFile(file: string): string {
  if (!file.includes('/')) return file;
  const name = file
    .split('/')
    .at(-1)!
    .replace(/\.json(\.gz)?$/, '');
  return name.length > FILE_SHOWN ? `…${name.slice(1 - FILE_SHOWN)}` : name;
}

function lastBackfillRow(b: NonNullable<StatusReport['gaps']['lastBackfill']>, now: Date): CardRow {
  const short = shortFile(b.file);
  const value = [short, b.state, relative(b.updatedAt, now)];
  return short === b.file ? ['last backfill', value] : ['last backfill', value, b.file];
}

function gapsCard(report: StatusReport): string {
  const g = report.gaps;
  const now = report.generatedAt;
  const b = g.lastBackfill;
  return card(
    'Gaps',
    `${g.byState.open} open`,
    [
      ['filled', String(g.byState.filled)],
      ['unavailable', String(g.byState.unavailable)],
      ['pushes recovered', count(g.eventsRecovered)],
      ['next fill', g.byState.open > 0 && g.nextFillAt ? nextPoll(g.nextFillAt, now) : '-'],
      b ? lastBackfillRow(b, now) : ['last backfill', 'never'],
    ],
    'gaps-card',
  );
}

/**
 * Pushes by commits_state, the fetch backlog and rate, commits stored; the pushes
 * waiting for a credential, and why commits are off when they are.
 */
function commitsCard(report: StatusReport): string {
  const c = report.commits;
  const rows: CardRow[] = [
    // Pending pushes due, and unverified ones a source covers (a mirror's commits to prove).
    ['due for fetching', count(c.pendingDue)],
    ...(c.awaitingCredential > 0
      ? [['waiting for a credential', count(c.awaitingCredential)] as CardRow]
      : []),
    ['requests (1h)', count(c.requestsLastHour)],
    ...PUSH_ORIGINS.map((o): [string, string] => [
      `backlog from ${o}`,
      count(c.pendingByOrigin[o]),
    ]),
    ...COMMITS_STATES.map((s): [string, string] => [`${s} pushes`, count(c.byState[s])]),
  ];
  const stored = `${c.storedEstimated ? '~' : ''}${count(c.stored)} stored`;
  return card('Commits', stored, rows, 'commits-card', c.off ? `commits are off: ${c.off}` : '');
}

/**
 * Commits by GraphQL: pushes a point over the last hour, and the pool's points window in parts
 * that add up to its quota (spent here, spent elsewhere, left), each a row of its own.
 */
function graphqlCard(report: StatusReport): string {
  const x = report.commits.graphql;
  const g = report.budget?.graphql ?? null;
  const now = report.generatedAt;
  const value =
    x.pushesPerPoint === null ? 'no point spent (1h)' : `${x.pushesPerPoint} pushes a point`;
  const window = (g: GraphQLBudget): CardRow[] => {
    const w = windowParts(g);
    return [
      ['points window', count(g.quota)],
      ['spent here', count(w.spent)],
      ...(w.elsewhere > 0 ? [['spent elsewhere', count(w.elsewhere)] as CardRow] : []),
      ['left', count(w.left)],
      ['resets', relative(g.resetAt, now)],
    ];
  };
  return card(
    'GraphQL',
    value,
    [
      ['pushes settled (1h)', count(x.pushes)],
      ['points spent (1h)', count(x.points)],
      ...(g ? window(g) : [['window', 'none (anonymous)'] as CardRow]),
      [
        'blocked',
        g?.blocked
          ? `${g.blocked.reason === 'auth' ? '401, ' : ''}until ${relative(g.blocked.until, now).replace('in ', '')}`
          : 'no',
      ],
    ],
    'graphql',
  );
}

/** The last hours by the origin each push first arrived from, open gaps shaded. */
function coverageChart(coverage: CoverageHour[]): string {
  if (coverage.length === 0) return '';
  return barChart(
    [
      { label: 'poll', color: '#2f81f7', values: coverage.map((c) => c.poll) },
      { label: 'webhook', color: '#1a7f37', values: coverage.map((c) => c.webhook) },
      { label: 'archive', color: '#bf8700', values: coverage.map((c) => c.archive) },
    ],
    {
      title: `Pushes per hour by origin, last ${coverage.length} h`,
      start: coverage[0]!.hour,
      stepMinutes: 60,
      marked: { label: 'open gap', color: '#cf222e', at: coverage.map((c) => c.gapsOpen > 0) },
    },
  );
}

/** The background allowance's floors, spend and lending. */
function backgroundCard(g: BackgroundReading): string {
  const why = (name: 'enrich' | 'commits') =>
    `${name} may always spend its floor; past it, what the other leaves while it waits for no REST request. Lent: what ${name}'s floor carried of the other's spend. May spend now: ${count(g.room[name])}`;
  // Two short rows a side, so no value wraps on a phone: the floor (and whether the side
  // waits for REST now), then what it spent and lent.
  const side = (name: 'enrich' | 'commits'): CardRow[] => [
    [`${name} floor`, `${count(g.floors[name])}${g.waiting[name] ? ', waits' : ''}`, why(name)],
    [`${name} spent / lent`, `${count(g.spent[name])} / ${count(g.lent[name])}`, why(name)],
  ];
  return card('Background', `${count(g.spent.enrich + g.spent.commits)} / ${count(g.allowance)}`, [
    ...side('enrich'),
    ...side('commits'),
  ]);
}

export function renderPage(
  report: StatusReport,
  series: MinuteSeries,
  coverage: CoverageHour[] = [],
): string {
  const now = report.generatedAt;
  const h = health(report);
  const a = report.activity;
  const b = report.budget;

  const cards = [
    card('Pushes held', count(a.pushes.total), [
      ['pushed (24h)', count(a.pushes.pushedLast24h)],
      ['arrived (24h)', count(a.pushes.last24h)],
      ['polled', count(a.pushes.poll)],
      ['by webhook', count(a.pushes.webhook)],
      ['from the archive', count(a.pushes.archive)],
      ['gaps (24h)', String(a.gapsLast24h)],
    ]),
    card('Rejected events', count(a.rejected.total), [
      ['new in 24h', count(a.rejected.last24h)],
      ...Object.entries(a.rejected.byReason).map(([k, v]): [string, string] => [k, count(v)]),
    ]),
    gapsCard(report),
    commitsCard(report),
    graphqlCard(report),
    b
      ? card(
          'Request budget',
          `${b.remaining === null ? '?' : count(b.remaining)} / ${count(b.quota)}`,
          [
            ['resets', relative(b.resetAt, now)],
            ['poll spent', spendParts(b).poll],
            ['enrich spent', count(b.spent.enrich)],
            ['commits spent', count(b.spent.commits)],
            ['enrich + commits', spendParts(b).background],
            [
              'GraphQL points',
              b.graphql
                ? `${count(b.graphql.spent)} of ${count(b.graphql.quota)}${b.graphql.blocked ? ', blocked' : ''}`
                : 'none (anonymous)',
            ],
            [
              'blocked',
              b.blockedUntil && b.blockedUntil > now
                ? `${b.blockReason === 'auth' ? '401, ' : ''}until ${relative(b.blockedUntil, now).replace('in ', '')}`
                : 'no',
            ],
          ],
        )
      : card('Request budget', 'unavailable', [['reason', report.budgetError ?? 'unknown']]),
    ...(report.background ? [backgroundCard(report.background)] : []),
    ...Object.entries(report.enrichment).map(([cls, x]) =>
      card(`${cls} backlog`, `${count(x.pending)} pending`, [
        ['due now', count(x.due)],
        ['claimed', count(x.claimed)],
        ['enriched', count(x.enriched)],
        ['failed / gone', `${count(x.failed)} / ${count(x.gone)}`],
      ]),
    ),
    card(
      'Webhooks',
      report.webhooksEnabled ? 'enabled' : 'disabled',
      report.webhooksEnabled
        ? [
            ['last delivery', relative(a.webhooks.lastReceivedAt, now)],
            ...Object.entries(a.webhooks.last24h).map(([k, v]): [string, string] => [
              `${k} (24h)`,
              String(v),
            ]),
          ]
        : [['set', 'WEBHOOK_SECRET']],
    ),
  ];

  const queues = report.queues
    ? `<div class="scroll"><table><thead><tr><th>queue</th><th class="num">waiting</th><th class="num">active</th><th class="num">completed</th><th class="num">failed</th><th class="num">oldest waiting</th></tr></thead><tbody>${report.queues
        .map(
          (q) =>
            `<tr><td>${e(q.name)}</td><td class="num">${q.jobs.created + q.jobs.retry}</td><td class="num">${q.jobs.active}</td><td class="num">${q.jobs.completed}</td><td class="num">${q.jobs.failed}</td><td class="num">${q.oldestWaitingSeconds === null ? '-' : e(duration(q.oldestWaitingSeconds))}</td></tr>`,
        )
        .join('')}</tbody></table></div>
<p class="muted">Last reconcile: ${
        report.lastReconcile
          ? `${e(report.lastReconcile.state)} ${e(relative(report.lastReconcile.completedAt ?? report.lastReconcile.startedAt, now))}`
          : 'never'
      }</p>`
    : `<p class="err">${e(report.queuesError)}</p>`;

  const hours = Math.round(series.minutes / 60);
  const charts = `<div class="charts">
${barChart([{ label: 'push events', color: '#2f81f7', values: series.eventsIngested }], {
  title: `Events ingested per minute, last ${hours} h`,
  start: series.start,
})}
${barChart(
  REQUEST_PURPOSES.map((purpose) => ({
    label: purpose,
    color: PURPOSE_COLORS[purpose],
    values: series.requestsSpent[purpose],
  })),
  { title: `Requests spent per minute, last ${hours} h`, start: series.start },
)}
</div>`;
  const coverageSection = `<section id="coverage"><h2>Coverage <span class="muted">(bin/status --coverage, view hourly_coverage)</span></h2>${coverage.length ? `<div class="charts">${coverageChart(coverage)}</div>` : ''}
${mirrorsSection(report)}
${openGapsSection(report)}
${historySection(report)}</section>`;

  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="30">
<title>github-push-ingestor status</title>
<link rel="icon" href="${FAVICON}">
<style>${CSS}</style>
</head>
<body>
<header><h1>github-push-ingestor</h1><span class="pill ${h.level}" id="health">${e(h.text)}</span>
<span class="muted">as of ${e(now.toISOString().replace('T', ' ').slice(0, 19))} UTC · <a href="/status">JSON</a> · <a href="/metrics">metrics</a></span></header>
<main>
<div class="cards">${cards.join('\n')}</div>
${credentialsSection(report)}
<section><h2>Activity</h2>${charts}</section>
${coverageSection}
${sourcesSections(report)}
<section><h2>Queues</h2>${queues}</section>
</main>
<footer>Refreshes every 30 s. Same data: <code>bin/status</code>, <code>GET /status</code>, and the <code>ingest_overview</code>, <code>enrichment_backlog</code>, <code>queue_overview</code> views.</footer>
</body>
</html>`;
}
