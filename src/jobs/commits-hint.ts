import type { PgBoss } from 'pg-boss';
import type { Logger } from '../platform/log.ts';
import { QUEUES } from './queue-names.ts';

/**
 * The post-commit hint for commit fetching (ADR 0070): after a transaction stored pushes
 * left `pending`, ONE job on the fetch-commits queue (stately: one queued + one active, so
 * a second hint while one waits is "already queued"). The job carries nothing: the fetcher
 * picks due pushes by its own policy. Sent after COMMIT, never inside the transaction; a
 * hint that is lost (a crash, a database blip, a queue not set up yet) loses no work, the
 * pending rows are committed and the reconciler finds them.
 */
export interface CommitsHintContext {
  /** What stored the pushes, for the log line: 'run 12', 'webhook delivery …', 'import'. */
  cause: string;
  runId?: number | null;
  deliveryId?: string;
}

export async function hintCommits(
  boss: PgBoss | undefined,
  log: Logger,
  pending: number,
  ctx: CommitsHintContext,
): Promise<'sent' | 'already_queued' | 'not_sent' | null> {
  if (pending <= 0 || !boss) return null;
  const fields = {
    new_pending: pending,
    queue: QUEUES.fetchCommits,
    ...(ctx.runId == null ? {} : { run_id: ctx.runId }),
    ...(ctx.deliveryId === undefined ? {} : { delivery_id: ctx.deliveryId }),
  };
  try {
    const jobId = await boss.send(QUEUES.fetchCommits, { reason: 'hint' });
    const status = jobId ? 'sent' : 'already_queued';
    log.info(
      { event: 'commits.dispatched', ...fields, status, commits_job_id: jobId },
      `commits hint for ${ctx.cause}: ${pending} pushes pending, ${status === 'sent' ? 'cycle sent' : 'cycle already queued'}`,
    );
    return status;
  } catch (err) {
    log.warn(
      { event: 'commits.hint_failed', ...fields, err },
      `commits hint for ${ctx.cause} not sent; the reconciler will find the pending pushes`,
    );
    return 'not_sent';
  }
}
