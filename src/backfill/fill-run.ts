import type { Deps } from '../work/deps.ts';
import { fillGaps, type GapFillResult } from './fill.ts';

/**
 * How the worker's backfill job runs a pass of gap fills. In bin/worker (and npm start)
 * the pass runs in a child process (fill-process.ts), so an import that dies — out of
 * memory on a hostile file, a native crash, a SIGKILL — takes the child, never the worker
 * and its polls. Tests that call the handler directly run it inline.
 */

export interface FillPass {
  jobId: string;
  /** Stop starting gaps after this instant (ms since the epoch). */
  deadline: number;
  /** Aborts the download in flight after its chunk (the worker is stopping). */
  signal: AbortSignal;
}

export interface FillRun {
  results: GapFillResult[];
  /** The pass's process ended before it reported: how. */
  died: { code: number | null; signal: string | null } | null;
}

export type FillRunner = (deps: Deps, pass: FillPass) => Promise<FillRun>;

/** In this process (tests; a caller that owns its own isolation). */
export const inlineFill: FillRunner = async (deps, pass) => ({
  results: await fillGaps(
    { ...deps, logger: deps.logger.child({ job_id: pass.jobId }) },
    { signal: pass.signal, shouldStop: () => Date.now() >= pass.deadline },
  ),
  died: null,
});
