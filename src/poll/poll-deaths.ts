import { type RawBuilder, sql } from 'kysely';
import { SPENDS_QUOTA } from '../budget/ledger.ts';
import { MAX_DEATHS } from '../platform/attempts.ts';
import type { Db } from '../platform/db/pool.ts';
import { prepared } from '../platform/db/prepared.ts';
import type { EventSource } from '../platform/db/schema.ts';
import { NotFound } from '../platform/errors.ts';
import { untilText } from '../platform/time-text.ts';
import { getSource } from '../store/sources.ts';

/**
 * Polls that killed their process (ADR 0120), counted as gap fills' deaths are.
 *
 * A poll that dies leaves its source due one poll interval on, never later: the
 * run's opening transaction moves the source's next poll to the run's start plus the interval
 * the feed last announced (scheduleIfItDies), and the commit of page 1 moves it to that
 * commit plus the interval page 1's answer announced — an answer read and stored is not the
 * suspect. So a successor polls the feed when the feed itself says to, and an ordinary crash
 * costs nothing. What stops a poison answer from crash-looping the worker is the count, not
 * the delay: a run left `running` is found dead later (the reconciler, or the next poll of
 * the source under its lock): it becomes `interrupted` and, in the same statement, a failure
 * of its source (consecutive_failures + 1) and — when a request of its own was sent and never
 * answered — a death (poll_deaths + 1). The MAX_DEATHS-th death since the source's last completed run
 * sets it aside for SET_ASIDE_SECONDS, with a last_error that says why and until when; a
 * completed run clears the count (a committed page does not: a poison page 2 behind a good
 * page 1 would loop forever), `bin/sources enable ID` clears it and polls at once. After the
 * day, one more try: a third death sets it aside again.
 */

/** How long a source whose polls died twice in a row waits: a day, then one more try. */
export const SET_ASIDE_SECONDS = 86_400;

export const INTERRUPTED_ERROR =
  'interrupted: the process running it ended before the run finished (its source lock was released)';

export interface DeadRun {
  runId: number;
  sourceId: number;
  /**
   * It died with a request of its own sent and unanswered: the answer is the suspect, and it
   * counts as a death. A run that died beside it (its process killed while it waited at the
   * gate or wrote a page) counts as a failure of its source only.
   */
  onAnswer: boolean;
  /** The source's deaths in a row, this one included. */
  deaths: number;
  /** When the source was set aside until, if this death set it aside. */
  setAsideUntil: Date | null;
}

/**
 * Marks the `running` runs that `where` selects as `interrupted` and counts each as a failure
 * and a death of its source, in one statement: a run is never interrupted without its death
 * counted, nor counted twice (only a `running` row turns `interrupted`).
 */
export async function interruptDeadRuns(
  db: Db,
  where: RawBuilder<unknown>,
  now: Date,
): Promise<DeadRun[]> {
  const until = new Date(now.getTime() + SET_ASIDE_SECONDS * 1000);
  const r = await sql<{
    id: string;
    source_id: string;
    on_answer: boolean;
    deaths: number;
    set_aside: boolean;
  }>`
    WITH dead AS (
      UPDATE ingestion_runs AS r
      SET status = 'interrupted', finished_at = ${now}, error = ${INTERRUPTED_ERROR}
      WHERE r.status = 'running' AND ${where}
      RETURNING r.id, r.source_id,
        -- Died on an answer: a request of this run sent and never answered (the small set
        -- of unfinished spending rows, github_requests_unfinished).
        EXISTS (SELECT 1 FROM github_requests q
                WHERE ${SPENDS_QUOTA} AND q.finished_at IS NULL AND q.outcome = 'sent'
                  AND q.run_id = r.id) AS on_answer
    ),
    per AS (
      SELECT source_id, count(*)::int AS n, count(*) FILTER (WHERE on_answer)::int AS died,
        max(id) AS last_run
      FROM dead GROUP BY source_id
    ),
    counted AS (
      UPDATE event_sources AS s SET
        poll_deaths = s.poll_deaths + per.died,
        consecutive_failures = s.consecutive_failures + per.n,
        next_poll_at = CASE WHEN per.died > 0 AND s.poll_deaths + per.died >= ${MAX_DEATHS}
          THEN ${until}::timestamptz ELSE s.next_poll_at END,
        last_error = CASE
          WHEN per.died = 0 THEN format('POLL_INTERRUPTED: run %s ended with its process while no request of it was in flight (not counted as a death)',
            per.last_run)
          WHEN s.poll_deaths + per.died >= ${MAX_DEATHS}
          THEN format('POLL_DIED: polling this source killed the process %s times in a row (killed, or out of memory, on its answer; last run %s); set aside until %s: bin/sources enable %s polls it again now',
            s.poll_deaths + per.died, per.last_run, ${untilText(until, now)}::text, s.id)
          ELSE format('POLL_DIED: run %s died on its answer (killed, or out of memory): %s of %s deaths in a row before the source is set aside',
            per.last_run, s.poll_deaths + per.died, ${MAX_DEATHS}::int) END,
        updated_at = ${now}
      FROM per WHERE s.id = per.source_id
      RETURNING s.id, s.poll_deaths,
        per.died > 0 AND s.poll_deaths >= ${MAX_DEATHS} AS set_aside
    )
    SELECT dead.id::text AS id, dead.source_id::text AS source_id, dead.on_answer,
      coalesce(counted.poll_deaths, 0) AS deaths, coalesce(counted.set_aside, false) AS set_aside
    FROM dead LEFT JOIN counted ON counted.id = dead.source_id
    ORDER BY dead.id`.execute(db);
  return r.rows.map((row) => ({
    runId: Number(row.id),
    sourceId: Number(row.source_id),
    onAnswer: row.on_answer,
    deaths: row.deaths,
    setAsideUntil: row.set_aside ? until : null,
  }));
}

/**
 * The runs of one source left `running`, found by the poll that now holds the source's lock:
 * their poller is gone (a run is `running` only while its poller holds that lock).
 */
export function interruptRunsOf(db: Db, sourceId: number, now: Date): Promise<DeadRun[]> {
  return interruptDeadRuns(db, sql`r.source_id = ${sourceId}`, now);
}

/**
 * The source, re-read under its lock, and its dead predecessors' runs interrupted: a poll
 * that holds the lock reads the source and whether any run of it is still `running` in one
 * cheap statement, and only then pays for interruptRunsOf (a statement dearer to plan than
 * the rest of a 304's opening, when it almost never finds a thing).
 */
export async function interruptPredecessors(
  db: Db,
  sourceId: number,
  now: Date,
): Promise<{ source: EventSource; died: DeadRun[] }> {
  // Not prepared: a cached `s.*` fails ("cached plan must not change result type") once a
  // migration adds a column under a running worker.
  const r = await sql<EventSource & { predecessor_running: boolean }>`
    SELECT s.*, EXISTS (SELECT 1 FROM ingestion_runs r -- by the id, not s.id: half the planning
                        WHERE r.source_id = ${sourceId} AND r.status = 'running') AS predecessor_running
    FROM event_sources s WHERE s.id = ${sourceId}`.execute(db);
  const row = r.rows[0];
  if (!row) throw new NotFound('source', sourceId);
  if (!row.predecessor_running) {
    const { predecessor_running: _, ...source } = row;
    return { source, died: [] };
  }
  const died = await interruptRunsOf(db, sourceId, now);
  return { source: await getSource(db, sourceId), died };
}

/** Where a poll that dies from `from` on leaves its source: one poll interval later. */
export function nextPollIfItDies(from: Date, pollIntervalSeconds: number): Date {
  return new Date(from.getTime() + Math.max(1, pollIntervalSeconds) * 1000);
}

/**
 * The source's next poll should this run die from here (nextPollIfItDies): in the run's
 * opening transaction, from its start and the interval the feed last announced; in page 1's
 * commit, from that commit and the interval page 1's answer announced. Any end of the run
 * writes its own schedule over it (a completed run's plan, a failure's backoff); a death
 * leaves it.
 */
export async function scheduleIfItDies(
  db: Db,
  sourceId: number,
  nextPollAt: Date,
  now: Date,
): Promise<void> {
  const schedule = db
    .updateTable('event_sources')
    .set({ next_poll_at: nextPollAt, updated_at: now })
    .where('id', '=', String(sourceId));
  // Prepared: the poll's opening transaction plans it once a session (src/platform/db/prepared.ts).
  await prepared(sql`${schedule}`).execute(db);
}

/**
 * One warn line per run found dead (reconcile.run_interrupted, or ingestion.run_interrupted
 * when the source's next poll found it), and one source.set_aside line when a death set its
 * source aside.
 */
export function logDeadRuns(
  log: { warn(fields: object, msg: string): void },
  runs: readonly DeadRun[],
  foundBy: 'reconcile' | 'poll',
  now: Date,
): void {
  for (const run of runs) {
    const fields = {
      run_id: run.runId,
      source_id: run.sourceId,
      on_answer: run.onAnswer,
      deaths: run.deaths,
      max_deaths: MAX_DEATHS,
    };
    log.warn(
      foundBy === 'reconcile'
        ? { event: 'reconcile.run_interrupted', ...fields }
        : { event: 'ingestion.run_interrupted', ...fields },
      `run ${run.runId} of source ${run.sourceId} was left running by a process that ended (killed, or out of memory); marked interrupted: a failure of the source${run.onAnswer ? `, died on its answer: ${run.deaths} of ${MAX_DEATHS} deaths in a row` : ' (no request in flight: not a death)'}`,
    );
    if (run.setAsideUntil) {
      log.warn(
        {
          event: 'source.set_aside',
          source_id: run.sourceId,
          deaths: run.deaths,
          until: run.setAsideUntil.toISOString(),
        },
        `source ${run.sourceId} set aside until ${untilText(run.setAsideUntil, now)}: polling it killed the process ${run.deaths} times in a row; bin/sources enable ${run.sourceId} polls it again now`,
      );
    }
  }
}
