import { type RawBuilder, sql } from 'kysely';

/**
 * Pacing within GitHub's secondary limit (ADR 0080): per credential, at most
 * GITHUB_ENDPOINT_RATE_PER_MINUTE requests a minute to one endpoint, counted by route
 * template, and spread rather than burst — consecutive requests of a credential to one
 * endpoint are at least 60 s / rate apart. The slot is taken in the statement that marks the
 * request sent, under the credential's request gate (one holder across every process), so
 * two processes never take the same slot; the caller waits for its slot, then sends.
 */

/** Segments followed by parameters, and how many (the rest of a compare path is one). */
const PARAMETERS: Record<string, readonly string[]> = {
  repos: ['{owner}', '{repo}'],
  networks: ['{owner}', '{repo}'],
  repositories: ['{repository_id}'],
  users: ['{username}'],
  user: ['{account_id}'],
  orgs: ['{org}'],
  installations: ['{installation_id}'],
  commits: ['{ref}'],
};

/** Longest path we bother to template: beyond it, the endpoint is its first segments. */
const MAX_SEGMENTS = 12;

/**
 * The route template of a request path: `/repos/octocat/hello/events?page=2` →
 * `/repos/{owner}/{repo}/events`; `/repos/o/r/compare/a...b` →
 * `/repos/{owner}/{repo}/compare/{basehead}`; `/repositories/1/events` →
 * `/repositories/{repository_id}/events`; `/users/x` → `/users/{username}`.
 * Numeric segments elsewhere are ids (`{id}`).
 */
export function routeTemplate(path: string): string {
  const bare = path.split(/[?#]/, 1)[0] ?? '';
  const segments = bare.split('/').filter((s) => s !== '');
  const out: string[] = [];
  for (let i = 0; i < segments.length && out.length < MAX_SEGMENTS; i++) {
    const s = segments[i]!;
    if (s === 'compare' && i + 1 < segments.length) {
      out.push(s, '{basehead}');
      break;
    }
    const params = PARAMETERS[s];
    if (params) {
      out.push(s);
      for (const p of params) {
        if (i + 1 >= segments.length) break;
        out.push(p);
        i++;
      }
      continue;
    }
    out.push(/^\d+$/.test(s) ? '{id}' : s);
  }
  return `/${out.join('/')}`;
}

/**
 * GraphQL's pacing: a query of `points` holds the credential's
 * `/graphql` row for points × 60 s / GRAPHQL_POINTS_PER_MINUTE, so its points a minute stay
 * under that rate however they are spread over queries.
 */
export function pointsSpacingMs(points: number, pointsPerMinute: number): number {
  return pointsPerMinute > 0 ? (points * 60_000) / pointsPerMinute : 0;
}

/** The least time between two requests of a credential to one endpoint; 0 when pacing is off. */
export function spacingMs(ratePerMinute: number): number {
  return ratePerMinute > 0 ? 60_000 / ratePerMinute : 0;
}

/**
 * The statement the request gate sends with its lock (`locked`: the gate's CTEs): marks
 * ledger row `id` sent and, with pacing on, takes the credential's next slot for the
 * request's endpoint (`now` or later, one spacing after the slot before it) as its sent_at
 * — one round trip, one transaction, once the gate is held. Selects `slot`: null when `id`
 * was not an open reservation (a slot taken then is only a little more spacing). No row at
 * all when `locked` has none (a try-lock that failed): nothing is written then.
 */
export function sentStatement(
  locked: RawBuilder<unknown>,
  id: number,
  at: {
    credential: string;
    path: string;
    method: string;
    now: Date;
    spacingMs: number;
    /**
     * The most the row may stand ahead of `now` (clock skew guard): one spacing for REST,
     * whose spacing is the same every request; a minute for GraphQL, whose spacing is the
     * points of the query before.
     */
    maxAheadMs?: number;
    jobId?: string | null;
    runId?: number | null;
  },
): RawBuilder<{ slot: Date | null }> {
  const now = sql`${at.now}::timestamptz`;
  const spacing = sql`make_interval(secs => ${at.spacingMs / 1000}::float8)`;
  const ahead = sql`make_interval(secs => ${(at.maxAheadMs ?? at.spacingMs) / 1000}::float8)`;
  const pace =
    at.spacingMs > 0
      ? sql`, pace AS (
      INSERT INTO github_endpoint_pace AS p (credential, endpoint, next_at)
      SELECT ${at.credential}, ${routeTemplate(at.path)}, ${now} + ${spacing} FROM locked
      ON CONFLICT (credential, endpoint)
        -- At most a spacing and a second ahead of this process's now: with one clock it never
        -- is (the previous holder waited for its slot before sending); a clock that jumped
        -- back, or another process's clock ahead of ours, must not make us wait longer.
        DO UPDATE SET next_at = GREATEST(
          LEAST(p.next_at, ${now} + ${ahead} + interval '1 second'), ${now}) + ${spacing}
      RETURNING next_at - ${spacing} AS slot
    )`
      : sql``;
  const slot = at.spacingMs > 0 ? sql`(SELECT slot FROM pace)` : sql`(SELECT ${now} FROM locked)`;
  return sql<{ slot: Date | null }>`
    WITH ${locked}${pace},
    sent AS (
      UPDATE github_requests
      SET outcome = 'sent', path = ${at.path}, method = ${at.method}, sent_at = ${slot},
          job_id = COALESCE(${at.jobId ?? null}::text, job_id),
          run_id = COALESCE(${at.runId ?? null}::bigint, run_id)
      WHERE id = ${String(id)} AND outcome = 'reserved' AND EXISTS (SELECT 1 FROM locked)
      RETURNING sent_at
    )
    SELECT (SELECT sent_at FROM sent) AS slot FROM locked`;
}
