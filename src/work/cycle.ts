/**
 * The one fetch loop (ADR 0170): enrichment and commit fetching both run "claim → reserve →
 * request → apply" steps until the work is idle, the budget or a rate limit says no, the cap
 * is reached, or the caller stops it. What a step is belongs to its domain (enrichOnce; a
 * GraphQL batch or a REST fetchOnce for commits); when to start one, and when to stop, lives
 * here once.
 *
 * The loop runs `lanes` steps at once — the process's in-flight plan (src/work/lanes.ts)
 * — each lane stepping until the cycle stops. That is as safe as that many workers: every
 * step claims under a lease with FOR UPDATE SKIP LOCKED and applies only while the lease is
 * still its own, and the request gates and the ledger bound what goes to GitHub whatever
 * the number of steps. Rules, the same for one lane or many:
 * - The cap is never overshot: a step takes its capacity before it starts, and gives back
 *   what it did not use when it ends.
 * - The first lane to see idle, budget_exhausted, rate_limited or a stop keeps every lane
 *   from starting another step; steps already in flight finish (a claimed entity is never
 *   interrupted) and are counted. A rate limit seen after another stop (a shutdown, the
 *   cycle's time) still wins: its retryAt is what the caller must wait for. So each lane may
 *   end on its own `idle` step: a summary's idle count is up to one a lane.
 * - An error in a step stops new steps the same way; once the rest have finished, it is
 *   thrown.
 */

/** What a step may say ends the cycle. */
export type StepStop = 'idle' | 'budget_exhausted' | 'rate_limited';

/** Why a cycle ended. */
export type CycleStop = StepStop | 'cap' | 'stopped';

export interface StepReport {
  /** Entities the step worked on: counted against the cap (and the summary's `processed`). */
  taken: number;
  /** Set when the cycle must end after this step. */
  stop?: StepStop;
  /** With `stop`: when the work may be tried again, if the step knows. */
  retryAt?: Date;
}

export interface FetchCycleOptions {
  /**
   * One step with capacity for at most `capacity` entities (1 ≤ capacity ≤ stepMax). It folds its own
   * domain counts into its caller's summary; the loop only needs its report.
   */
  step: (capacity: number) => Promise<StepReport>;
  /** Steps at once (at least 1). */
  lanes: number;
  /** Entities a cycle works on at most (default: no cap). */
  cap?: number;
  /** Entities one step may take at most (default 1: one entity a step). */
  stepMax?: number;
  /** Checked before each step: true ends the cycle as `stopped`, between steps. */
  shouldStop?: () => boolean;
  /** Aborted → `stopped`, checked before each step; never interrupts one. */
  signal?: AbortSignal;
}

export interface FetchCycleResult {
  /** Entities the steps worked on, every lane's. */
  processed: number;
  stoppedBy: CycleStop;
  retryAt?: Date;
  /** Steps run, every lane's. */
  steps: number;
  /** Most steps in flight at once. */
  maxInFlight: number;
}

/**
 * What one entity's outcome means for the loop (enrichOnce, fetchOnce): idle and
 * budget_exhausted end the cycle without having worked on the entity (its claim was given
 * back, or there was none); rate_limited worked on it (the attempt was recorded) and ends it.
 */
export function oneEntityReport(outcome: string, retryAt?: Date): StepReport {
  if (outcome === 'idle' || outcome === 'budget_exhausted') {
    return { taken: 0, stop: outcome, retryAt };
  }
  if (outcome === 'rate_limited') return { taken: 1, stop: 'rate_limited', retryAt };
  return { taken: 1 };
}

export async function runFetchCycle(opts: FetchCycleOptions): Promise<FetchCycleResult> {
  const cap = opts.cap ?? Number.POSITIVE_INFINITY;
  const stepMax = Math.max(1, opts.stepMax ?? 1);
  const lanes = Math.max(1, Math.floor(opts.lanes) || 1);
  // Entities worked on plus those in-flight steps may still take. Never above cap.
  let capacityTaken = 0;
  let processed = 0;
  let steps = 0;
  let inFlight = 0;
  let maxInFlight = 0;
  let stop: { by: CycleStop; retryAt?: Date } | null = null;
  let failure: { err: unknown } | null = null;

  const halt = (by: CycleStop, retryAt?: Date) => {
    // The first stop ends the cycle; a rate limit seen by a step still in flight replaces
    // it, since it carries the time the caller must wait for.
    // Two rate limits: the later retryAt, since neither lane may go before it.
    if (!stop || (by === 'rate_limited' && stop.by !== 'rate_limited')) stop = { by, retryAt };
    else if (by === 'rate_limited' && retryAt && (!stop.retryAt || retryAt > stop.retryAt)) {
      stop.retryAt = retryAt;
    }
  };

  const lane = async (): Promise<void> => {
    for (;;) {
      if (stop || failure) return;
      const capacity = Math.min(stepMax, cap - capacityTaken);
      // No capacity: the cap is met by the steps done and in flight. A step in flight that
      // gives capacity back takes it itself on its next turn.
      if (capacity <= 0) return;
      if (opts.shouldStop?.() || opts.signal?.aborted) {
        halt('stopped');
        return;
      }
      capacityTaken += capacity;
      steps += 1;
      inFlight += 1;
      maxInFlight = Math.max(maxInFlight, inFlight);
      let report: StepReport;
      try {
        report = await opts.step(capacity);
      } catch (err) {
        capacityTaken -= capacity;
        failure ??= { err };
        return;
      } finally {
        inFlight -= 1;
      }
      const taken = Math.max(0, Math.min(capacity, report.taken));
      capacityTaken -= capacity - taken;
      processed += taken;
      if (report.stop) {
        halt(report.stop, report.retryAt);
        return;
      }
    }
  };

  await Promise.all(Array.from({ length: lanes }, lane));
  if (failure) throw (failure as { err: unknown }).err;
  // Every lane ended without a stop: each found no capacity, so the cap is met.
  const ended = (stop as { by: CycleStop; retryAt?: Date } | null) ?? { by: 'cap' as const };
  return {
    processed,
    stoppedBy: ended.by,
    ...(ended.retryAt ? { retryAt: ended.retryAt } : {}),
    steps,
    maxInFlight,
  };
}
