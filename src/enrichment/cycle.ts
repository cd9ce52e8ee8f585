import type { EntityClass } from '../budget/types.ts';
import { type CycleStop, oneEntityReport, runFetchCycle } from '../work/cycle.ts';
import { fetchLanes, type LaneDeps } from '../work/lanes.ts';
import { type EnrichDeps, type EnrichOutcome, type EnrichResult, enrichOnce } from './runner.ts';

/**
 * One enrichment cycle (ADR 0170): the shared fetch loop (src/work/cycle.ts) with enrichOnce
 * (runner.ts) as its step, over one class or both in turns, until nothing is due, the budget
 * or a rate limit says stop, the cap, or the caller stops it.
 */

export interface CycleOptions {
  jobId?: string | null;
  /** Stop after this many entities (default: until idle or told no). */
  maxEntities?: number;
  /** Aborted → the cycle stops between entities, never mid-request (a stop, the job's time). */
  signal?: AbortSignal;
  /** Each entity worked on, as it is settled (bin/enrich prints a line an entity). */
  onResult?: (r: EnrichResult) => void | Promise<void>;
}

export interface CycleSummary {
  class: EntityClass;
  /** Entities a request was made for. */
  processed: number;
  /** Steps by outcome, every lane's: `idle` and `budget_exhausted` up to one a lane. */
  outcomes: Record<EnrichOutcome, number>;
  stoppedBy: CycleStop;
  /** Set when rate limited: when the class may run again. */
  retryAt?: Date;
}

export interface ClassesSummary extends Omit<CycleSummary, 'class'> {
  classes: readonly EntityClass[];
  /** The refusal that ended a cycle stopped by budget_exhausted (its reason, and detail). */
  refusal?: Pick<EnrichResult, 'reason' | 'detail'>;
}

function emptyOutcomes(): Record<EnrichOutcome, number> {
  return {
    idle: 0,
    enriched: 0,
    not_modified: 0,
    gone: 0,
    retry: 0,
    failed: 0,
    rate_limited: 0,
    budget_exhausted: 0,
  };
}

/**
 * The classes a cycle serves, in turn. A class leaves the turn when it is idle, or when its
 * half is used while the other class has work (fair_share); a class that left for its half
 * comes back once another goes idle (the split is work-conserving). Lanes share it: each
 * takes the next class when it starts a step, so two lanes work on the two classes.
 */
function classTurns(classes: readonly EntityClass[]) {
  let active = [...classes];
  let parked: EntityClass[] = [];
  let turn = 0;
  return {
    next: (): EntityClass | null => (active.length ? active[turn++ % active.length]! : null),
    idle(cls: EntityClass): void {
      active = [...active.filter((c) => c !== cls), ...parked];
      parked = [];
    },
    park(cls: EntityClass): void {
      if (!active.includes(cls)) return;
      active = active.filter((c) => c !== cls);
      parked.push(cls);
    },
    anyParked: () => parked.length > 0,
  };
}

/**
 * One cycle over `classes` (bin/enrich: both, or one with --class; a worker's
 * enrich-actor / enrich-repository job: its own): enrichOnce until nothing is due, the
 * budget or the share rule says no, GitHub rate-limits us, the cap is reached, or the caller
 * asks to stop — the shared fetch loop (src/work/cycle.ts), one lane per REST fetcher of
 * the in-flight plan. Concurrent enrichOnce calls in one process are as safe as two workers:
 * each claims its own row (claim.ts: FOR UPDATE SKIP LOCKED, then a lease) and applies only
 * while stillOurs holds (the entity's id, this worker, this lease's time).
 */
export async function enrichClasses(
  deps: EnrichDeps & LaneDeps,
  classes: readonly EntityClass[],
  opts: CycleOptions = {},
): Promise<ClassesSummary> {
  const outcomes = emptyOutcomes();
  const turns = classTurns(classes);
  let refusal: ClassesSummary['refusal'];
  const run = await runFetchCycle({
    lanes: fetchLanes(deps, 'rest', 'enrich'),
    cap: opts.maxEntities,
    signal: opts.signal,
    step: async () => {
      for (;;) {
        const cls = turns.next();
        if (cls === null)
          return { taken: 0, stop: turns.anyParked() ? 'budget_exhausted' : 'idle' };
        const r = await enrichOnce(deps, cls, { jobId: opts.jobId });
        outcomes[r.outcome] += 1;
        if (r.outcome === 'idle') {
          turns.idle(cls);
          continue;
        }
        if (r.outcome === 'budget_exhausted' && r.reason === 'fair_share') {
          // This class's half: the other class has work, and takes the turn.
          turns.park(cls);
          continue;
        }
        if (r.outcome === 'budget_exhausted') refusal = { reason: r.reason, detail: r.detail };
        else await opts.onResult?.(r);
        return oneEntityReport(r.outcome, r.outcome === 'rate_limited' ? r.retryAt : undefined);
      }
    },
  });
  return {
    classes,
    processed: run.processed,
    outcomes,
    stoppedBy: run.stoppedBy,
    ...(run.retryAt ? { retryAt: run.retryAt } : {}),
    ...(run.stoppedBy === 'budget_exhausted' && refusal ? { refusal } : {}),
  };
}

/** One cycle of a class: what the enrich-actor / enrich-repository jobs run. */
export async function enrichCycle(
  deps: EnrichDeps & LaneDeps,
  cls: EntityClass,
  opts: CycleOptions = {},
): Promise<CycleSummary> {
  const {
    classes: _classes,
    refusal: _refusal,
    ...summary
  } = await enrichClasses(deps, [cls], opts);
  return { class: cls, ...summary };
}
