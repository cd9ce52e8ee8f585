import type pg from 'pg';
import type { CommitEmailMode } from '../platform/config/config.ts';
import type { CommitSource, PushOrigin } from '../platform/db/columns.ts';
import { copyFrom } from '../platform/db/copy.ts';
import type { Db } from '../platform/db/pool.ts';
import { AppError } from '../platform/errors.ts';
import { jsonTextUnderPolicy } from './commit-emails.ts';
import { storeCommits, storeCommitsOn, textArray } from './commits.ts';
import {
  asEventIdRace,
  type Contender,
  type IdClash,
  POLL_RANK,
  type Run,
  runOnClient,
  runOnDb,
  settleDisputes,
} from './event-ids.ts';
import {
  type CommitsContext,
  DEFAULT_COMMITS,
  inlineCommitRows,
  insertedList,
  planCommits,
  stagedState,
} from './inline-commits.ts';
import type { PushRow } from './mapping.ts';
import { payloadRest } from './payload-rest.ts';
import {
  MERGE_PUSHES_ONLY,
  MERGE_PUSHES_ONLY_NEW,
  MERGE_VALUES_RENAMING,
  type MergeCounts,
  STAGE_COLUMNS,
  STAGE_TABLE,
} from './push-merge.ts';
import { ensurePushMonths, ensurePushMonthsOn } from './push-months.ts';
import type { StageBatch } from './stage-batch.ts';

/**
 * Writing pushes and the people and repositories behind them, the bulk store path (ADR
 * 0040): thousands of pushes per transaction, near the cost of a COPY. Callers pass a
 * transaction: a page (poll), a delivery (webhook) or a chunk (archive) is stored all or
 * nothing. The rows are COPYed into a session-local staging table, then ONE statement merges
 * them into actors, repositories and push_events:
 *
 * - a push is its natural key (repository_id, ref, before, head): its key goes into
 *   push_keys first, `ON CONFLICT` on it alone, and only a push whose key went in is
 *   stored, in its month's partition (docs/schema.md), so a push stored already (by any origin,
 *   in any month) or repeated within the batch is one row, and no push is ever skipped for its event id, which is an attribute unique per era
 *   (src/store/event-ids.ts): a push contending for an id another push holds is recorded,
 *   and settled by rank when both are of one era;
 * - a webhook copy (id NULL) of a push in the batch gets the batch's event id, unless
 *   another push contends for that id in the same era (then the dispute settles it);
 * - rows are written in key order (actors by id, then repositories by id, then pushes by
 *   natural key), so concurrent writers take row locks in the same order.
 *
 * Two entry points, one per caller:
 * - bulkStorePage (poll pages): the rows as parameter arrays, actors, repositories and
 *   pushes in one statement. Polled pushes are current, so the newest login / full_name of
 *   the batch replaces a different one (as storePushes does).
 * - insertStagedEntities, then bulkStoreStaged (archive import): the entities first, on a
 *   connection of their own, then the pushes COPYed into the stage and merged alone. An
 *   archive file is history, so it only inserts actors and repositories that are missing
 *   and never renames one we hold — a month-old hour file must not turn a login back into
 *   what it used to be.
 *
 * For bulkStoreStaged the caller owns the transaction on `client` (a raw pg client: COPY
 * needs the protocol). The staging table is a temporary table (never WAL-logged, invisible
 * to other sessions) whose rows vanish at commit.
 */

export interface StoreOptions {
  origin: 'poll' | 'webhook';
  sourceId?: number | null;
  runId?: number | null;
  /** Who gets commits and what addresses become; absent: nobody, hashed. */
  commits?: CommitsContext;
  /** Who contends for the pushes' event ids; default GitHub's own answer. */
  contender?: Partial<Contender>;
}

export interface StoreResult {
  /** push_events rows this call inserted (a push already stored, by either origin, is not new). */
  created: number;
  /** Actors / repositories inserted (state 'pending': they need enriching). */
  newActors: number;
  newRepositories: number;
  /**
   * Pushes this call inserted for the fetcher — pending, or unverified and covered (a
   * fetch-commits hint after COMMIT).
   */
  commitsPending: number;
  /** Event id clashes this call recorded (event_id_clashes): log each after COMMIT. */
  clashes: IdClash[];
}

/**
 * Stores pushes with their actors and repositories. A push is identified by its natural key
 * (repository_id, ref, before, head) — the same push polled twice, polled by two sources,
 * or delivered by webhook and polled, is ONE row. Its event id is an attribute (unique per
 * era); a webhook copy gets the id when the poll brings it. The one statement of the bulk
 * store does it all: this is its name for a delivery.
 */
export async function storePushes(
  trx: Db,
  pushes: PushRow[],
  opts: StoreOptions,
): Promise<StoreResult> {
  const { idsFilledIn: _, ...result } = await bulkStorePage(trx, pushes, opts);
  return result;
}

export interface BulkStoreOptions {
  origin: PushOrigin;
  sourceId?: number | null;
  runId?: number | null;
  commits?: CommitsContext;
  /** Who contends for the batch's ids; default: GitHub's own answer (a poll). */
  contender?: Partial<Contender>;
  /**
   * Where the pushes' inline commits come from; default by origin: a poll's are GitHub's, a
   * delivery's the webhook's, an archive's a mirror's.
   */
  inlineSource?: CommitSource;
  /**
   * The caller's session, when it has one (src/platform/db/session.ts sessionOf): the merge is then
   * a prepared statement of it, planned once (the caller's transaction is the same).
   */
  session?: Run;
}

/** bulkStoreStaged's options: the staged path stores archive pushes only. */
export interface StagedStoreOptions {
  sourceId?: number | null;
  /**
   * The caller expects no push of the batch to be stored already (a fresh file). The insert skips
   * conflict handling; if one is stored after all, PushesAlreadyStored is thrown (inside a
   * transaction that must then be rolled back to before the call).
   */
  expectNew?: boolean;
  /** Addresses of inline commits (the targets were applied when the batch was staged). */
  emails?: CommitEmailMode;
  /** The mirror the batch was read from, ranked in GHARCHIVE_URL. */
  contender?: Partial<Contender>;
}

export interface BulkStoreResult extends StoreResult {
  /** Webhook copies whose event id this batch filled in. */
  idsFilledIn: number;
}

/** A contender with its defaults: GitHub's own answer, no mirror. */
function contenderOf(origin: PushOrigin, given: Partial<Contender> = {}): Contender {
  return {
    origin,
    rank: given.rank ?? POLL_RANK,
    mirrorId: given.mirrorId ?? null,
    mirror: given.mirror ?? null,
    mirrors: given.mirrors ?? [],
  };
}

/** A result of nothing stored. */
export function emptyStoreResult(): BulkStoreResult {
  return {
    created: 0,
    newActors: 0,
    newRepositories: 0,
    commitsPending: 0,
    idsFilledIn: 0,
    clashes: [],
  };
}

/** Creates this session's staging table (idempotent; call outside or inside a transaction). */
export async function prepareStage(client: pg.ClientBase): Promise<void> {
  await client.query(
    `CREATE TEMP TABLE IF NOT EXISTS ${STAGE_TABLE} (${STAGE_COLUMNS}) ON COMMIT DELETE ROWS`,
  );
}

/** Drops the staging table, so a pooled session goes back clean. */
export async function dropStage(client: pg.ClientBase): Promise<void> {
  await client.query(`DROP TABLE IF EXISTS pg_temp.${STAGE_TABLE}`);
}

/** Empties the stage inside a transaction (a retried half after a failed merge). */
export async function clearStage(client: pg.ClientBase): Promise<void> {
  await client.query(`DELETE FROM ${STAGE_TABLE}`);
}

function resultOf(row: MergeCounts): BulkStoreResult {
  return {
    created: Number(row.created),
    newActors: Number(row.actors),
    newRepositories: Number(row.repositories),
    commitsPending: Number(row.pending),
    idsFilledIn: Number(row.filled),
    clashes: row.clashes,
  };
}

/**
 * The archive's entity inserts on their own (insert-only, never renaming): the batch's
 * entities not known to exist, each once with its newest name, in id order. A statement
 * of its own, so the archive import can run it on a second connection while the previous
 * chunk's pushes are merged (src/backfill/import.ts): the two touch different tables, and
 * each takes its row locks in the same order as every other writer.
 */
const INSERT_ENTITIES = `
  WITH a AS (
    INSERT INTO actors (id, login)
    SELECT * FROM unnest($1::bigint[], $2::text[]) AS v (id, login) ORDER BY id
    ON CONFLICT (id) DO NOTHING RETURNING 1
  ), r AS (
    INSERT INTO repositories (id, full_name)
    SELECT * FROM unnest($3::bigint[], $4::text[]) AS v (id, full_name) ORDER BY id
    ON CONFLICT (id) DO NOTHING RETURNING 1
  )
  SELECT (SELECT count(*) FROM a) AS actors, (SELECT count(*) FROM r) AS repositories`;

/** Ids and names; the statement orders them by id (as bigint) itself. */
function entries(m: Map<string, [string, number]>): [string[], string[]] {
  const ids = [...m.keys()];
  return [ids, ids.map((id) => m.get(id)![0])];
}

/** Inserts the batch's actors and repositories not known to exist (archive rule: never renames). */
export async function insertStagedEntities(
  client: pg.ClientBase,
  batch: StageBatch,
): Promise<{ newActors: number; newRepositories: number }> {
  if (batch.newActors.size === 0 && batch.newRepositories.size === 0) {
    return { newActors: 0, newRepositories: 0 };
  }
  const [actorIds, logins] = entries(batch.newActors);
  const [repoIds, names] = entries(batch.newRepositories);
  const r = await client.query<{ actors: string; repositories: string }>(INSERT_ENTITIES, [
    actorIds,
    logins,
    repoIds,
    names,
  ]);
  return { newActors: Number(r.rows[0]!.actors), newRepositories: Number(r.rows[0]!.repositories) };
}

/** `expectNew` was wrong: a push of the batch is stored already. Merge the batch again without it. */
export class PushesAlreadyStored extends AppError {
  constructor(cause: unknown) {
    super('PUSHES_ALREADY_STORED', 'a push of the batch is already stored', {}, { cause });
  }
}

/**
 * Stages rows [from, to) of an archive batch and merges their pushes (origin 'archive').
 * Their actors and repositories are not touched: insertStagedEntities must have stored
 * them (committed) before. Call inside a transaction on `client`, after prepareStage, with
 * the stage empty (it is after every commit, and after a rollback to a savepoint taken
 * before the call).
 */
export async function bulkStoreStaged(
  client: pg.ClientBase,
  batch: StageBatch,
  opts: StagedStoreOptions,
  from = 0,
  to = batch.length,
): Promise<BulkStoreResult> {
  if (to <= from) return emptyStoreResult();
  await ensurePushMonthsOn(client, batch.months.values());
  await copyFrom(client, `COPY ${STAGE_TABLE} FROM STDIN`, [batch.bytes(from, to)]);
  const statement = opts.expectNew ? MERGE_PUSHES_ONLY_NEW : MERGE_PUSHES_ONLY;
  const commits = batch.commitsByList(from, to);
  const contender = contenderOf('archive', opts.contender);
  const r = await client
    .query<MergeCounts>(statement, [
      'archive',
      opts.sourceId ?? null,
      null,
      contender.mirrorId,
      contender.mirror,
    ])
    .catch((err: { code?: string; constraint?: string }) => {
      if (
        statement === MERGE_PUSHES_ONLY_NEW &&
        err.code === '23505' &&
        err.constraint === 'push_events_natural_key'
      ) {
        throw new PushesAlreadyStored(err);
      }
      throw asEventIdRace(err);
    });
  const result = resultOf(r.rows[0]!);
  result.clashes.push(
    ...(await settleDisputes(runOnClient(client), r.rows[0]!.contested, contender)),
  );
  const emails = opts.emails ?? DEFAULT_COMMITS.emails;
  if (statement === MERGE_PUSHES_ONLY_NEW) {
    // Every push of the chunk was inserted by this merge (else PushesAlreadyStored), those
    // of `listed` with their lists as their commits make them: only the commits' rows are
    // left to store. Finding and locking each new push again to merge a list into itself
    // was a random probe of the head's index a push, the largest cost of a big month.
    if (commits.listed.length > 0) {
      await storeCommitsOn(client, commits.listed, { emails, listsWritten: true });
    }
    if (commits.merged.length > 0) await storeCommitsOn(client, commits.merged, { emails });
  } else {
    const all = [...commits.listed, ...commits.merged];
    if (all.length > 0) await storeCommitsOn(client, all, { emails });
  }
  return result;
}

/**
 * The bulk merge for a page (a poll page, a webhook's push): one statement, the rows as
 * parameter arrays — no temporary table, no COPY. With inline commits a second statement
 * stores them (src/store/commits.ts): call inside a transaction. Same keys, lock order and
 * merge rule (renaming) as storePushes.
 */
export async function bulkStorePage(
  db: Db,
  pushes: readonly PushRow[],
  opts: BulkStoreOptions,
): Promise<BulkStoreResult> {
  if (pushes.length === 0) return emptyStoreResult();
  const ctx = opts.commits ?? DEFAULT_COMMITS;
  const given = opts.inlineSource ?? INLINE_SOURCE_OF[opts.origin];
  const plans = pushes.map((p) => planCommits(p, ctx.targets, given));
  const splits = pushes.map((p, i) => payloadRest(p, plans[i]!));
  const lists = plans.map(insertedList);
  const col = <T>(f: (p: PushRow) => T) => pushes.map(f);
  const contender = contenderOf(opts.origin, opts.contender);
  const params = [
    opts.origin,
    opts.sourceId ?? null,
    opts.runId ?? null,
    contender.mirrorId,
    contender.mirror,
    col((p) => p.id),
    col((p) => p.actor.id),
    col((p) => p.actor.login),
    col((p) => p.repository.id),
    col((p) => p.repository.fullName),
    col((p) => p.pushId),
    col((p) => p.ref),
    col((p) => p.head),
    col((p) => p.before),
    col((p) => p.createdAt),
    // What the columns do not hold, under COMMIT_EMAILS (its commits' addresses, any other).
    splits.map(({ rest }) => (rest === null ? null : jsonTextUnderPolicy(rest, ctx.emails))),
    col((p) => p.size),
    plans.map((c) => c.distinctSize),
    plans.map((c) => c.count),
    plans.map(stagedState),
    plans.map((c) => c.due),
    plans.map((c) => c.refused),
    col((p) => p.org?.id ?? null),
    col((p) => p.org?.login ?? null),
    splits.map(({ held }) => held),
    // Each push's inline list, so its row is written once (inline-commits.ts insertedList).
    lists.map((l) => l?.flags ?? null),
    lists.map((l) => l?.shaHex ?? null),
    lists.map((l) => textArray(l?.shaTexts)),
  ];
  await ensurePushMonths(
    db,
    col((p) => p.createdAt),
  );
  const run = opts.session ?? runOnDb(db);
  const [row] = await run<MergeCounts>(
    MERGE_VALUES_RENAMING.text,
    params,
    MERGE_VALUES_RENAMING.name,
  ).catch((err: unknown) => {
    throw asEventIdRace(err);
  });
  const result = resultOf(row!);
  result.clashes.push(...(await settleDisputes(run, row!.contested, contender)));
  const commits = inlineCommitRows(pushes, plans);
  if (commits.length > 0) await storeCommits(db, commits, { emails: ctx.emails });
  return result;
}

/** Whose inline commits a push of each origin carries, unless the caller says. */
const INLINE_SOURCE_OF: Record<PushOrigin, CommitSource> = {
  poll: 'github',
  webhook: 'webhook',
  archive: 'mirror',
};
