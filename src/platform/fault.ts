/**
 * Crash-window fault points (test/recovery/crash-matrix.test.ts). `faultPoint(name)`
 * marks a window between two durable effects. It does nothing unless the process was
 * started with FAULT_POINT=name, in which case the process SIGKILLs itself right there:
 * no finally blocks, no graceful shutdown — a real crash. FAULT_POINT is read at every
 * call (cheap) so tests can start a child per point.
 */
export const FAULT_POINTS = [
  'ingest.after_page_commit',
  'ingest.after_finalize',
  'ingest.after_lock_release',
  'github.after_sent',
  'github.after_settle',
  'enrich.after_claim',
  'enrich.after_reserve',
  'enrich.after_response',
  'enrich.after_apply',
  'webhook.after_delivery_insert',
  'commits.after_claim',
  'commits.after_response',
  'commits.after_store',
  'retention.before_commit',
] as const;

export type FaultPointName = (typeof FAULT_POINTS)[number];

export function faultPoint(name: FaultPointName): void {
  if (process.env.FAULT_POINT === name) {
    process.stderr.write(`FAULT_POINT ${name}: killing process ${process.pid}\n`);
    process.kill(process.pid, 'SIGKILL');
  }
}

/**
 * FAULT_JOB=<queue> (tests only): the process SIGKILLs itself as soon as it starts running a
 * job of that queue — after taking the job's liveness lock, so the lock dies with it, as it
 * would in any crash mid-job (test/recovery/orphaned-jobs.test.ts).
 */
export function jobFaultPoint(queue: string): void {
  if (process.env.FAULT_JOB === queue) {
    process.stderr.write(`FAULT_JOB ${queue}: killing process ${process.pid}\n`);
    process.kill(process.pid, 'SIGKILL');
  }
}
