import { type App, createApp } from '../app.ts';
import { hintDispatcher, startHintSender } from '../jobs/dispatch.ts';
import { NotFound } from '../platform/errors.ts';
import { pollDueSources } from '../poll/poll-due.ts';
import type { AfterRun, RunSummary } from '../poll/run-summary.ts';
import { parseCli, positiveIntFlag } from './args.ts';
import { describeFailure } from './failure.ts';

const USAGE = `
Usage: bin/ingest [--source ID] [--force] [--json]

Polls every due source of this process's GITHUB_MODE now (enabled, next_poll_at
arrived), one after the other, and prints one line per source. Safe beside a running
worker: a source another process is polling is reported "busy" and left alone. After
each run it sends the worker one enrichment hint per class with new pending rows.

  --source ID  poll only this source
  --force      ignore next_poll_at (never the request budget)
  --json       print the run summaries as a JSON array

A source the request budget refuses before its first request is "deferred": nothing
is sent, no run is recorded, and it is polled again when the budget frees (the line says
"budget spent until HH:MM UTC"). That is not a failure.

Exit codes: 0 no run failed (completed, not_modified, busy, skipped and deferred all
count); 1 at least one run failed, or GitHub rejected every credential (401: a source is
deferred with GITHUB_AUTH_FAILED), or another error (a lost database connection: the
runs committed before it are still printed, then one line naming it); 2 bad arguments
or configuration. A credential GitHub rejects while others remain is set aside and its
request sent on another: the run goes on.
`;

export interface IngestOptions {
  sourceId?: number;
  force?: boolean;
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

export function formatSummary(s: RunSummary): string {
  const head = `source ${s.sourceId} ${s.source}: ${s.outcome}`;
  switch (s.outcome) {
    case 'busy':
      return `${head} (another process is polling it)`;
    case 'skipped':
      return `${head} (${s.reason ?? 'not due'})`;
    case 'deferred':
      // Nothing was sent: the budget said no before page 1, and the source waits for it.
      return `${head}: ${s.reason}; nothing sent; next poll ${s.nextPollAt?.toISOString()}`;
    default: {
      const counts = [
        `${plural(s.eventsSeen, 'event')} seen`,
        `${s.eventsCreated} created`,
        ...(s.eventsRejected ? [`${s.eventsRejected} set aside (rejected_events)`] : []),
        plural(s.pagesFetched, 'page'),
        `${plural(s.requestsSpent, 'request')} spent`,
      ].join(', ');
      const gap = s.gap ? ', GAP: older events fell out of the feed before we read them' : '';
      const error = s.error ? ` (${s.error.code}: ${s.error.message})` : '';
      const next = s.nextPollAt ? `; next poll ${s.nextPollAt.toISOString()}` : '';
      return `${head}${error}: ${counts}${gap}${next}`;
    }
  }
}

/**
 * Runs one ingest pass on an existing App. `afterRun` receives each summary after its
 * run committed and its lock was released: the queue layer passes its enrichment-hint
 * dispatcher here (hints are post-commit by design).
 */
export async function runIngest(
  app: App,
  opts: IngestOptions,
  afterRun?: AfterRun,
): Promise<RunSummary[]> {
  return pollDueSources(app, { sourceId: opts.sourceId, force: opts.force, afterRun });
}

/**
 * Why nothing was polled, and what would help: --force only when this mode has enabled
 * sources that are merely not due; otherwise what the other sources are.
 */
async function nothingDue(app: App): Promise<string> {
  const mode = app.config.github.mode;
  const r = await app.db
    .selectFrom('event_sources')
    .select(['mode', 'enabled', (eb) => eb.fn.countAll<string>().as('n')])
    .groupBy(['mode', 'enabled'])
    .execute();
  const n = (m: string, enabled: boolean) =>
    Number(r.find((x) => x.mode === m && x.enabled === enabled)?.n ?? 0);
  if (n(mode, true) > 0) return `no ${mode} sources due (use --force to poll them now)`;
  const other = mode === 'live' ? 'fixture' : 'live';
  const parts = [`no enabled ${mode} sources`];
  if (n(mode, false) > 0)
    parts.push(`${plural(n(mode, false), `disabled ${mode} source`)} (bin/sources enable ID)`);
  if (n(other, true) > 0)
    parts.push(`${plural(n(other, true), `${other} source`)} (polled with GITHUB_MODE=${other})`);
  if (parts.length === 1) parts.push('add one with bin/sources add');
  return parts.join('; ');
}

function printSummaries(
  summaries: RunSummary[],
  json: boolean,
  mode: string,
  empty = `no ${mode} sources due`,
): void {
  if (json) {
    process.stdout.write(`${JSON.stringify(summaries, null, 2)}\n`);
  } else if (summaries.length === 0) {
    process.stdout.write(`${empty}\n`);
  } else {
    for (const s of summaries) process.stdout.write(`${formatSummary(s)}\n`);
  }
}

export async function main(argv: string[]): Promise<number> {
  const parsed = parseCli(argv, USAGE, {
    source: { type: 'string' },
    force: { type: 'boolean' },
    json: { type: 'boolean' },
  });
  if (!parsed) return 0;
  const sourceId = positiveIntFlag('source', parsed.values.source, USAGE);
  const app = await createApp({ role: 'ingest', writesStoredData: true });
  // Post-commit hints, as the worker sends them, so a live worker enriches at once.
  const boss = await startHintSender(app, 'ingest');
  const dispatch = boss && hintDispatcher(boss, app.logger);
  // Each run as it is committed: what was done stays printed if a later one fails.
  const done: RunSummary[] = [];
  try {
    let summaries: RunSummary[];
    try {
      summaries = await runIngest(app, { sourceId, force: parsed.values.force }, async (s) => {
        done.push(s);
        await dispatch?.(s);
      });
    } catch (err) {
      if (err instanceof NotFound) {
        process.stderr.write(`ingest: no source with id ${sourceId} (see bin/sources list)\n`);
        return 1;
      }
      // The database (or anything else) failed mid-pass: the runs committed before it
      // stand; print them, then one line saying what stopped the rest.
      printSummaries(done, parsed.values.json === true, app.config.github.mode);
      process.stderr.write(
        `ingest: stopped after ${plural(done.length, 'source')}: ${describeFailure(err)}\n`,
      );
      return 1;
    }
    printSummaries(
      summaries,
      parsed.values.json === true,
      app.config.github.mode,
      summaries.length === 0 ? await nothingDue(app) : undefined,
    );
    const failed = summaries.some(
      (s) => s.outcome === 'failed' || (s.outcome === 'deferred' && s.error !== null),
    );
    return failed ? 1 : 0;
  } finally {
    await boss?.stop({ graceful: true, timeout: 5_000 }).catch(() => {});
    await app.close();
  }
}
