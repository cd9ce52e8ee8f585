import { sql } from 'kysely';
import type { PoolRefusal } from '../budget/client-types.ts';
import { describeRejected } from '../github/errors.ts';
import { credentialHint } from '../platform/config/credential-label.ts';
import type { Db } from '../platform/db/pool.ts';
import type { EventSource } from '../platform/db/schema.ts';
import type { Logger } from '../platform/log.ts';
import { untilText } from '../platform/time-text.ts';

/**
 * A poll the budget refused before any request. Nothing was sent, so nothing
 * failed: no run row, no failure counted, no warning per tick. The source simply waits
 * until the budget frees — `next_poll_at` = the refusal's retryAt (GitHub's reset, the
 * oldest spend leaving the window, or the end of a block) — so the refusal is met once per
 * refusal period, not on every tick. `last_error` keeps its real cause; only a credential
 * blocked by a 401 writes one (GITHUB_AUTH_FAILED), because that is the real cause.
 */

export interface Deferral {
  retryAt: Date;
  reason: PoolRefusal['reason'];
  blockReason: PoolRefusal['blockReason'];
  /** "CODE: message" for event_sources.last_error when the deferral is an auth failure. */
  authError: string | null;
}

/**
 * A refusal of the whole pool (every credential said no; see src/budget/reserve.ts): it is an
 * auth failure only when every credential is blocked by a 401, and names each of them (since
 * when, until when) when the client says, else the one that frees first.
 */
export function deferralOf(refusal: PoolRefusal): Deferral {
  const auth = refusal.reason === 'blocked' && refusal.blockReason === 'auth';
  const rejected = refusal.rejected ?? [];
  return {
    retryAt: refusal.retryAt,
    reason: refusal.reason,
    blockReason: refusal.blockReason ?? null,
    authError: !auth
      ? null
      : rejected.length > 1
        ? `GITHUB_AUTH_FAILED: ${describeRejected(rejected)}`
        : `GITHUB_AUTH_FAILED: GitHub rejected credential ${refusal.credential} (401); it is blocked until ${refusal.retryAt.toISOString()} — check ${credentialHint(refusal.credential)}`,
  };
}

/**
 * Why, in a few words: "budget spent until 08:16 UTC", "rate limited until …", … — with the
 * date when the end is not later today ("until 2026-12-03 08:16 UTC").
 */
export function describeDeferral(d: Deferral, now: Date = new Date()): string {
  const until = untilText(d.retryAt, now);
  if (d.blockReason === 'auth')
    return `GitHub rejected the credential (401); blocked until ${until}`;
  if (d.blockReason === 'rate_limit') return `rate limited by GitHub until ${until}`;
  return `budget spent until ${until}`;
}

/**
 * Moves the sources' next poll to the deferral's end, never earlier: a source whose next
 * poll is already later (another process polled it meanwhile and scheduled past the
 * refusal) keeps its schedule. One polled meanwhile but due before the deferral ends is
 * moved too — the budget would refuse it until then anyway. Returns the rows as updated.
 */
export async function deferSources(
  db: Db,
  ids: number[],
  d: Deferral,
  now: Date,
): Promise<EventSource[]> {
  if (ids.length === 0) return [];
  return db
    .updateTable('event_sources')
    .set({
      next_poll_at: d.retryAt,
      last_error: d.authError ?? sql<string | null>`last_error`,
      updated_at: now,
    })
    .where('id', 'in', ids.map(String))
    .where('next_poll_at', '<=', d.retryAt)
    .returningAll()
    .execute();
}

/** One line for every source a refusal period put off (info; warn when it is a 401). */
export function logDeferral(
  log: Logger,
  d: Deferral,
  sources: { sourceId: number; source: string }[],
): void {
  if (sources.length === 0) return;
  const first = sources[0]!;
  const who =
    sources.length === 1
      ? `source ${first.sourceId} (${first.source})`
      : `${sources.length} sources (${sources.map((s) => s.sourceId).join(', ')})`;
  const fields = {
    event: 'ingestion.deferred',
    source_ids: sources.map((s) => s.sourceId),
    reason: d.reason,
    block_reason: d.blockReason,
    retry_at: d.retryAt.toISOString(),
    ...(d.authError ? { error_code: 'GITHUB_AUTH_FAILED' } : {}),
  };
  const msg = `${describeDeferral(d)}: ${who} will poll then`;
  if (d.authError) log.warn(fields, msg);
  else log.info(fields, msg);
}
