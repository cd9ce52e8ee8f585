import type { ColumnType, Generated as KyselyGenerated } from 'kysely';

/**
 * What the columns of the business schema (src/platform/db/schema.ts) hold: the column types
 * Kysely reads and writes them as, and every enumeration a column takes, one list each with
 * its type derived from it.
 */

export type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;
export type NullableTimestamp = ColumnType<
  Date | null,
  Date | string | null | undefined,
  Date | string | null
>;
/**
 * bigint columns arrive from pg as strings. GitHub ids are 64-bit: keep them as decimal
 * strings (never Number()); our own identities (source, run, request ids) are small and
 * may be parsed to numbers.
 */
export type BigId = ColumnType<string, number | string | bigint, number | string | bigint>;
/**
 * Kysely's Generated, but unwrapping a ColumnType: Kysely's own Generated<BigId> nests one
 * ColumnType in another, so selects return the wrapper type and `where('id', '=', 5)` fails
 * to typecheck. The tuple stops `boolean` from distributing.
 */
export type Generated<S> = [S] extends [ColumnType<infer Sel, infer Ins, infer Upd>]
  ? ColumnType<Sel, Ins | undefined, Upd>
  : KyselyGenerated<S>;

/** The raw GitHub answer, kept whole beside the columns pulled out of it. */
export type ProfileJson = ColumnType<
  Record<string, unknown> | null,
  string | null | undefined,
  string | null
>;

export const SOURCE_KINDS = ['public', 'repo', 'org', 'user'] as const;
export type SourceKind = (typeof SOURCE_KINDS)[number];
export type GithubMode = 'live' | 'fixture';
export const RUN_STATUSES = [
  'running',
  'completed',
  'not_modified',
  'failed',
  'interrupted',
] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];
export const ENRICHMENT_STATES = ['pending', 'enriched', 'failed', 'gone'] as const;
export type EnrichmentState = (typeof ENRICHMENT_STATES)[number];
/**
 * Every enumeration below is one list, and the type is derived from it: a status page, a
 * metric or a chart that walks purposes, states or origins walks the list (or a
 * Record<…> keyed by the type, which the compiler holds complete), never its own copy.
 */
export const REQUEST_PURPOSES = ['poll', 'enrich', 'commits'] as const;
export type RequestPurpose = (typeof REQUEST_PURPOSES)[number];
export type RequestOutcome = 'reserved' | 'sent' | 'completed' | 'error' | 'abandoned';
/** How a push first arrived: polled, delivered by webhook, or read from a GH Archive file. */
export const PUSH_ORIGINS = ['poll', 'webhook', 'archive'] as const;
export type PushOrigin = (typeof PUSH_ORIGINS)[number];
export const GAP_STATES = ['open', 'filled', 'unavailable'] as const;
export type GapState = (typeof GAP_STATES)[number];
/**
 * 'missing': the mirror has no such hour (404/410). 'open': read while the mirror said the
 * hour was still open: its lines are stored, and it is read again until final.
 */
export const BACKFILL_FILE_STATES = ['running', 'completed', 'failed', 'missing', 'open'] as const;
export type BackfillFileState = (typeof BACKFILL_FILE_STATES)[number];
/**
 * What is known of a push's commits: pending (a targeted push waiting for the
 * fetcher), complete / partial (stored, all or some), none (deleted ref or tag: no commits),
 * skipped (nobody targets it), gone (GitHub no longer has them), failed (gave up),
 * unverified (stored as a mirror gave them, not yet proven by GitHub).
 */
export const COMMITS_STATES = [
  'pending',
  'complete',
  'partial',
  'none',
  'skipped',
  'gone',
  'failed',
  'unverified',
] as const;
export type CommitsState = (typeof COMMITS_STATES)[number];
/**
 * Where a commit row's text came from: GitHub's own answer (compare, GraphQL, a
 * polled event), a webhook delivery, an archive vouched for (GH Archive's own hours before
 * 2025-10-08, a file named on the command line), or a mirror (any other archive).
 */
export const COMMIT_SOURCES = ['github', 'webhook', 'archive', 'mirror'] as const;
export type CommitSource = (typeof COMMIT_SOURCES)[number];
/**
 * Two pushes found contending for one event id: `reused` (different eras: GitHub reused
 * the id, both keep it) or `disputed` (one era: one keeps it, the other is stored without).
 */
export const EVENT_ID_CLASH_KINDS = ['reused', 'disputed'] as const;
export type EventIdClashKind = (typeof EVENT_ID_CLASH_KINDS)[number];

export const BLOCK_REASONS = ['rate_limit', 'auth'] as const;
export type BlockReason = (typeof BLOCK_REASONS)[number];
