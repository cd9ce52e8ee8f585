import { systemClock } from '../clock.ts';
import type { GithubMode } from '../db/schema.ts';
import { type Deferral, deferSources, logDeferral } from './deferral.ts';
import { pollSource } from './poll-source.ts';
import {
  deferredSummary,
  emptySummary,
  type IngestionDeps,
  type PollOptions,
  type RunSummary,
} from './run-summary.ts';
import { newFleetCache } from './schedule.ts';
import { getSource } from './sources.ts';

/**
 * Polling the due sources of this process's mode, a few at a time. One source's poll is
 * src/ingestion/poll-source.ts; its pages fetch-pages.ts; its end finalize.ts.
 */

export { MAX_PAGES, PER_PAGE } from './fetch-pages.ts';
export { pollSource } from './poll-source.ts';
export type {
  AfterRun,
  IngestionDeps,
  PollOptions,
  RunOutcome,
  RunSummary,
} from './run-summary.ts';

/**
 * The due-source pre-filter (exported so the benchmark can time and EXPLAIN the exact
 * statement). A pre-filter only: each source is re-read under its lock, which decides.
 */
export function dueSourcesQuery(
  db: IngestionDeps['db'],
  mode: GithubMode,
  now: Date,
  force = false,
) {
  let due = db
    .selectFrom('event_sources')
    .select('id')
    .where('enabled', '=', true)
    .where('mode', '=', mode)
    .orderBy('next_poll_at')
    .orderBy('id');
  if (!force) due = due.where('next_poll_at', '<=', now);
  return due;
}

/** Sources polled at once by pollDueSources (see pollConcurrency). */
export const MAX_CONCURRENT_POLLS = 3;

/**
 * How many sources to poll at once. The gate still sends one request at a time per
 * credential; concurrency lets one source's page be stored (and its run bookkeeping
 * written) while another's request is in flight. A poll whose request is held (ADR 0082)
 * does everything on its source lock's session; one whose gate was busy also reads and gives
 * back through the pool, so each poll may hold two pool connections at worst, and the pool
 * must have room for every poll's pair plus one spare for everything else — a poll that
 * holds its lock client and waits for a second connection must always get one.
 */
export function pollConcurrency(poolMax: number | undefined): number {
  const max = poolMax ?? 10; // pg's default
  return Math.max(1, Math.min(MAX_CONCURRENT_POLLS, Math.floor((max - 1) / 2)));
}

/**
 * Polls every due source of this process's mode, a few at a time (pollConcurrency), each
 * under its own lock. Summaries come back in the pre-filter's order (most overdue first).
 * An unexpected error stops new polls from starting; those in flight finish, then it is thrown.
 */
export async function pollDueSources(
  deps: IngestionDeps,
  opts: PollOptions & { sourceId?: number } = {},
): Promise<RunSummary[]> {
  const { sourceId, ...pollOpts } = opts;
  // One named source (bin/ingest --source): polled or reported skipped; NotFound if unknown.
  if (sourceId !== undefined) return [await pollSource(deps, sourceId, pollOpts)];
  const clock = deps.clock ?? systemClock;
  const now = clock.now();
  const due = await dueSourcesQuery(deps.db, deps.config.github.mode, now, opts.force).execute();
  const summaries: RunSummary[] = new Array(due.length);
  // Every plan of this round reads the fleet's sums once (ADR 0082).
  const fleet = pollOpts.fleet ?? newFleetCache();
  let next = 0;
  let failure: { err: unknown } | null = null;
  // Once the budget refuses one source, it refuses them all (the refusal means every
  // credential's poll allowance is spent or blocked): the rest are put off together, without
  // asking it again for each.
  let deferral: Deferral | null = null;
  const putOff: number[] = [];
  const worker = async () => {
    while (failure === null && next < due.length) {
      const i = next++;
      if (deferral) {
        putOff.push(i);
        continue;
      }
      try {
        summaries[i] = await pollSource(deps, Number(due[i]!.id), {
          ...pollOpts,
          fleet,
          logDeferral: false,
        });
        deferral ??= summaries[i]!.deferral ?? null;
      } catch (err) {
        failure ??= { err };
      }
    }
  };
  const workers = Math.min(due.length, pollConcurrency(deps.pool.options?.max));
  await Promise.all(Array.from({ length: workers }, worker));
  if (failure) throw (failure as { err: unknown }).err;
  if (deferral) {
    const d: Deferral = deferral;
    const rows = await deferSources(
      deps.db,
      putOff.map((i) => Number(due[i]!.id)),
      d,
      clock.now(),
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    for (const i of putOff) {
      const row = byId.get(due[i]!.id);
      // Not updated: another process polled it meanwhile and scheduled it past the refusal.
      summaries[i] = row
        ? deferredSummary(row, d)
        : {
            ...emptySummary(await getSource(deps.db, Number(due[i]!.id)), 'skipped'),
            reason: 'polled elsewhere meanwhile',
          };
    }
    const deferred = summaries.filter((s) => s.outcome === 'deferred');
    logDeferral(opts.jobId ? deps.logger.child({ job_id: opts.jobId }) : deps.logger, d, deferred);
  }
  return summaries;
}
