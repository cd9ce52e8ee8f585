import { inFlightPlan } from '../budget/concurrency.ts';
import { systemClock } from '../platform/clock.ts';
import type { GithubMode } from '../platform/db/columns.ts';
import { getSource } from '../store/sources.ts';
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

/**
 * Polling the due sources of this process's mode, as many at a time as its plan says. One source's poll is
 * src/poll/poll-source.ts; its pages fetch-pages.ts; its end finalize.ts.
 */

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

/**
 * How many sources pollDueSources polls at once: the process's in-flight plan (about two a
 * credential, so every credential's gate stays busy up to its pacing), or, for a caller
 * without one (tests, benches), the plan its client's credentials make within its
 * pool. Either way every poll has room for the two connections it may hold (its lock's
 * session, and a moment of a second one: concurrency.ts, CONNECTIONS_PER_POLL).
 */
export function pollsInFlight(deps: Pick<IngestionDeps, 'inFlight' | 'github' | 'pool'>): number {
  if (deps.inFlight) return Math.max(1, deps.inFlight.polls);
  return inFlightPlan({
    credentials: deps.github.credentials,
    role: 'ingest',
    poolMax: deps.pool.options?.max ?? 10, // pg's default
  }).polls;
}

/**
 * Polls every due source of this process's mode, pollsInFlight at a time, each
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
  // Every plan of this pass reads the fleet's sums once.
  const fleet = pollOpts.fleet ?? newFleetCache();
  let next = 0;
  let failure: { err: unknown } | null = null;
  // Once the budget refuses one source, it refuses them all (the refusal means every
  // credential's poll allowance is spent or blocked): the rest are put off together, without
  // asking it again for each.
  let deferral: Deferral | null = null;
  const putOff: number[] = [];
  // One poll at a gate per credential from this pass; the others wait for a ticket without
  // opening (src/budget/gate-tickets.ts), and do the database work of polls past their gate.
  const pass = deps.github.pollPass();
  const worker = async () => {
    while (failure === null && next < due.length) {
      const ticket = await pass.take();
      if (failure !== null || next >= due.length) {
        ticket();
        break;
      }
      const i = next++;
      if (deferral) {
        ticket();
        putOff.push(i);
        continue;
      }
      try {
        summaries[i] = await pollSource(deps, Number(due[i]!.id), {
          ...pollOpts,
          fleet,
          logDeferral: false,
          ticket,
        });
        deferral ??= summaries[i]!.deferral ?? null;
      } catch (err) {
        failure ??= { err };
      } finally {
        ticket();
      }
    }
  };
  const workers = Math.min(due.length, pollsInFlight(deps));
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
