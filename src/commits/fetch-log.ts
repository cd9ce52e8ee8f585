import type { FetchDeps, FetchResult } from './fetch-rest.ts';

/** `log` is already bound to the job (job_id), when a job runs this. */
export function logResult(log: FetchDeps['logger'], r: FetchResult): void {
  const fields = {
    repo: r.repo ?? null,
    repository_id: r.push?.repositoryId,
    ref: r.push?.ref,
    before: r.push?.before,
    head: r.push?.head,
    count: r.commitCount ?? null,
    stored: r.stored ?? null,
    state: r.outcome,
    status: r.status ?? null,
    request_id: r.requestId ?? null,
    requests: r.requests,
  };
  const what = `${r.repo ?? r.push?.repositoryId} ${r.push?.ref} ${r.push?.before.slice(0, 7)}...${r.push?.head.slice(0, 7)}`;
  if (r.outcome === 'retry' || r.outcome === 'failed') {
    log.warn(
      {
        event: 'commits.failed',
        ...fields,
        will_retry: r.outcome === 'retry',
        retry_at: r.retryAt,
        detail: r.detail,
      },
      `commits of ${what}: ${r.detail}`,
    );
  } else {
    log.info(
      { event: 'commits.fetched', ...fields, detail: r.detail },
      `commits of ${what}: ${r.outcome}${r.commitCount === undefined ? '' : ` (${r.stored}/${r.commitCount})`}`,
    );
  }
}
