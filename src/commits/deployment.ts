import { sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';

/**
 * Whether commits are on for the deployment, not for the process that asks (ADR 0186): a
 * `bin/status` or `bin/web` started from a shell without the workers' token must say what
 * the workers do. The database knows the credentials they use: every answer GitHub gives
 * records a rate-limit observation (github_rate_limits), every request that spends is
 * counted per minute (github_request_minutes). A credential some process used within the
 * last hour is in use; `anonymous` is no credential (GraphQL refuses it). A deployment whose
 * processes all lack one stores the pushes its sources cover `skipped`, waiting for one.
 */

/** Used within this, a credential is the deployment's (a worker polls every minute or so). */
export const CREDENTIAL_IN_USE_MS = 3_600_000;

export const NO_CREDENTIAL_IN_USE =
  'no GitHub credential: no process used one in the last hour, and commits are fetched with GraphQL, which needs one (set GITHUB_TOKEN, GITHUB_TOKENS or GITHUB_APP_ID for bin/worker); covered pushes wait for one';

export const NO_SOURCE_WANTS_COMMITS =
  'no enabled source has commits on (bin/sources commits ID on)';

/** true when some process used a credential (not `anonymous`) within CREDENTIAL_IN_USE_MS. */
export function credentialInUseSql(now: Date) {
  const since = new Date(now.getTime() - CREDENTIAL_IN_USE_MS);
  return sql<boolean>`(EXISTS (SELECT 1 FROM github_rate_limits
        WHERE credential <> 'anonymous' AND (observed_at > ${since} OR blocked_until > ${now}))
      OR EXISTS (SELECT 1 FROM github_request_minutes
        WHERE credential <> 'anonymous' AND minute >= date_trunc('minute', ${since}::timestamptz, 'UTC')
          AND poll + enrich + commits > 0))`;
}

/** true when an enabled source has commits on (one probe of event_sources). */
export function sourceWantsCommitsSql() {
  return sql<boolean>`EXISTS (SELECT 1 FROM event_sources WHERE enabled AND commits_enabled)`;
}

/** Why no push arriving now gets its commits, deployment-wide, or null when some do. */
export function commitsOffFor(o: { credentialInUse: boolean; sourceWants: boolean }) {
  if (!o.credentialInUse) return NO_CREDENTIAL_IN_USE;
  return o.sourceWants ? null : NO_SOURCE_WANTS_COMMITS;
}

/** Whether the deployment uses a credential, and whether a source asks for commits. */
export async function deploymentCommits(
  db: Db,
  now: Date,
): Promise<{ credentialInUse: boolean; sourceWants: boolean; off: string | null }> {
  const r = await sql<{ credential: boolean; wants: boolean }>`
    SELECT ${credentialInUseSql(now)} AS credential, ${sourceWantsCommitsSql()} AS wants`.execute(
    db,
  );
  const o = { credentialInUse: r.rows[0]!.credential, sourceWants: r.rows[0]!.wants };
  return { ...o, off: commitsOffFor(o) };
}
