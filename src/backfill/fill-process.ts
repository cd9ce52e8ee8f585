import { fork } from 'node:child_process';
import { systemClock } from '../platform/clock.ts';
import { AppError } from '../platform/errors.ts';
import type { FillPass, FillRun, FillRunner } from './fill-run.ts';
import { dueGaps } from './gaps.ts';
import { lateMirrorHours } from './mirror-hours.ts';

/**
 * The worker's gap fills in a child process (ADR 0061). The child gets the worker's
 * environment with the database it resolved (an embedded server is joined, not started
 * again), a capped heap, and the worker's stderr for its log lines; it reports its results
 * over IPC and exits. A stopping worker asks it to stop after its chunk in flight; a worker
 * that dies disconnects it, and it stops the same way. Whatever ends the child ends only
 * the child: the job reports `died`, and the gap's open attempt tells the next fill.
 */

/** The child's old-space cap: an import holds a chunk (~30 MB); the rest is garbage to collect. */
const CHILD_HEAP_MB = 256;

export type ChildMessage =
  | { type: 'results'; results: FillRun['results'] }
  | { type: 'failed'; code: string | null; message: string };
export type ParentMessage = { type: 'start'; pass: Omit<FillPass, 'signal'> } | { type: 'stop' };

export function childFill(databaseUrl: string): FillRunner {
  return async (deps, pass) => {
    // The job runs every tick: a process is only worth starting when a gap is due, or an
    // hour of a filled gap that a mirror lacked is due to be asked again (fillGaps does both).
    const now = (deps.clock ?? systemClock).now();
    const due = await dueGaps(deps.db, now, 1);
    if (due.length === 0) {
      const late = await lateMirrorHours(deps.db, now, deps.config.archive.mirrors, 1);
      if (late.length === 0) return { results: [], died: null };
    }
    return forkFill(databaseUrl, pass);
  };
}

function forkFill(databaseUrl: string, pass: FillPass): Promise<FillRun> {
  return new Promise<FillRun>((resolve, reject) => {
    const child = fork(new URL('../cli/fill-child.ts', import.meta.url), [], {
      env: { ...process.env, DATABASE_URL: databaseUrl },
      execArgv: [
        ...process.execArgv.filter((a) => !a.startsWith('--max-old-space-size')),
        `--max-old-space-size=${CHILD_HEAP_MB}`,
      ],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'advanced',
    });
    let results: FillRun['results'] | null = null;
    let failure: AppError | null = null;
    const stop = () => {
      if (child.connected) child.send({ type: 'stop' } satisfies ParentMessage);
    };
    pass.signal.addEventListener('abort', stop);
    child.on('message', (m: ChildMessage) => {
      if (m.type === 'results') results = m.results;
      else failure = new AppError(m.code ?? 'BACKFILL_FILL_FAILED', m.message);
    });
    child.once('error', (err) => {
      pass.signal.removeEventListener('abort', stop);
      reject(err);
    });
    child.once('exit', (code, signal) => {
      pass.signal.removeEventListener('abort', stop);
      if (failure) reject(failure);
      else resolve(results ? { results, died: null } : { results: [], died: { code, signal } });
    });
    child.send({
      type: 'start',
      pass: { jobId: pass.jobId, deadline: pass.deadline },
    } satisfies ParentMessage);
    if (pass.signal.aborted) stop();
  });
}
