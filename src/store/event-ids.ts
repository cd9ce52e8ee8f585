import { CompiledQuery } from 'kysely';
import type pg from 'pg';
import { EVENT_ID_INDEX } from '../../db/migrations/2026-12-01T1401_event_id_index.ts';
import type { EventIdClashKind, PushOrigin } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import { AppError } from '../platform/errors.ts';
import { compareIds } from '../platform/json/exact.ts';
import type { Logger } from '../platform/log.ts';
import { withoutUserinfo } from '../platform/redact.ts';

/**
 * Event ids are attributes, not keys (ADR 0122). GitHub reset its event id sequence on 2025-10-08 and new ids
 * reuse those of 2016–2020, so an id names one event per **era**: the UTC year its event
 * was created in (SQL `event_id_era(created_at)`, migration 2026-12-01T1400). The same
 * event read twice has the same created_at, so it is always in one era; GitHub's reuse is
 * years apart, never within one.
 *
 * The natural key decides what is stored: no push is ever skipped because another push
 * holds its id. When a stored push is found contending for the id of another:
 *
 * - **reused**: the two are of different eras. Both keep the id; the pair is recorded.
 * - **disputed**: the same era, so one of them is wrong (a mirror made it up, or two
 *   mirrors disagree). Both pushes are stored; the id stays with the better-ranked
 *   contender and the other is stored without it (`id` NULL), the pair recorded. Rank: what GitHub
 *   itself answered (a poll) first, then archive mirrors in GHARCHIVE_URL order, then
 *   anything else (a local file, a mirror no longer configured); a tie goes to the earlier
 *   created_at, then the lower natural key. So the outcome never depends on which was read
 *   first, or on retry timing.
 *
 * The unique index push_events_event_id (id, era) holds "one push per id and era" for
 * every writer. The store inserts a contested push without its id (one statement, below),
 * then settleDisputes gives the id to the winner; two writers racing on one id meet at the
 * index, and the later one's store is tried again (EventIdRace), seeing the other's push.
 */

/** An event id's era: the UTC year of its event (event_id_era in SQL). */
export function eventIdEra(at: Date): number {
  return at.getUTCFullYear();
}

/** Rank of a contender no configured mirror read (a local file, a mirror since removed). */
export const UNLISTED_RANK = 1000;

/** A poll (GitHub's own answer) outranks every archive as a contender. */
export const POLL_RANK = 0;

/** A GHARCHIVE_URL entry as an archive source names its mirror (no trailing slash). */
export function mirrorName(url: string): string {
  return url.replace(/\/+$/, '');
}

/** The rank of an archive mirror's pushes as contenders: its place in GHARCHIVE_URL (1 = first). */
export function mirrorRank(mirror: string, mirrors: readonly string[]): number {
  const at = mirror === '' ? -1 : mirrors.map(mirrorName).indexOf(mirrorName(mirror));
  return at < 0 ? UNLISTED_RANK : at + 1;
}

/**
 * A store found another writer's push on an id it was contending for (the unique index
 * push_events_event_id), or deadlocked with it. Nothing was stored: try the same store
 * again — it will see the other push and settle the contest against it.
 */
export class EventIdRace extends AppError {
  constructor(cause: unknown) {
    super(
      'EVENT_ID_RACE',
      'another writer stored a push under the same event id at the same time; store again',
      {},
      { cause },
    );
  }
}

/** The error as an EventIdRace when it is one (a unique violation of the era index, a deadlock). */
export function asEventIdRace(err: unknown): unknown {
  const e = err as { code?: string; constraint?: string } | null;
  if (e?.code === '40P01' || (e?.code === '23505' && e.constraint === EVENT_ID_INDEX)) {
    return new EventIdRace(err);
  }
  return err;
}

/** How many times a store is tried again after an EventIdRace before giving up. */
export const RACE_RETRIES = 5;

/** One side of a clash: a stored push and where it came from. */
export interface ClashSide {
  repositoryId: string;
  ref: string;
  before: string;
  head: string;
  createdAt: string;
  origin: PushOrigin;
  mirror: string | null;
}

/** A clash recorded in event_id_clashes by this store (log it once, after COMMIT). */
export interface IdClash {
  eventId: string;
  kind: EventIdClashKind;
  /** The push that holds the id (for `reused`, the one stored before; both hold it). */
  kept: ClashSide;
  /** The other push: stored without the id when `disputed`, with it when `reused`. */
  other: ClashSide;
}

/** A push the store left without its id because another push contends for it in the same era. */
export interface ContestedPush {
  id: string;
  repositoryId: string;
  ref: string;
  before: string;
  head: string;
  createdAt: string;
}

/** Who is contending: the batch's rank and mirror, the configured mirrors (for stored pushes). */
export interface Contender {
  origin: PushOrigin;
  rank: number;
  mirrorId: number | null;
  mirror: string | null;
  /** GHARCHIVE_URL in order; stored archive pushes are ranked by their place in it. */
  mirrors: readonly string[];
}

/**
 * Runs one statement with positional parameters, on a pg client or a Kysely connection.
 * With a `name`, on a client, it is a prepared statement of that session: planned once
 * (the store's statements are large, and planning them each time cost more than running
 * them on a page of a hundred), never on a Kysely connection, which cannot name one.
 */
export type Run = <R>(text: string, params: readonly unknown[], name?: string) => Promise<R[]>;

export function runOnClient(client: pg.ClientBase): Run {
  return async <R>(text: string, params: readonly unknown[], name?: string) =>
    (await client.query({ text, values: params as unknown[], ...(name ? { name } : {}) }))
      .rows as R[];
}

export function runOnDb(db: Db): Run {
  return async <R>(text: string, params: readonly unknown[]) =>
    (await db.executeQuery<R>(CompiledQuery.raw(text, params as unknown[]))).rows as R[];
}

/**
 * The id of a mirror in archive_mirrors (`''` for a local file), inserted the first time.
 * Stored without its userinfo, as every URL is (the request alone keeps the password).
 */
export async function archiveMirrorId(run: Run, configured: string): Promise<number> {
  const url = configured === '' ? '' : withoutUserinfo(configured);
  const rows = await run<{ id: number }>(
    `WITH i AS (INSERT INTO archive_mirrors (url) VALUES ($1) ON CONFLICT (url) DO NOTHING RETURNING id)
     SELECT id FROM i UNION ALL SELECT id FROM archive_mirrors WHERE url = $1`,
    [url],
  );
  return rows[0]!.id;
}

const KEY = ['repository_id', 'ref', 'before', 'head'] as const;
/** SQL: the natural key of table `t`, with an optional column prefix (`o_`: the other push). */
const key = (t: string, prefix = '') => `(${KEY.map((c) => `${t}.${prefix}${c}`).join(', ')})`;
/** SQL: an unambiguous text of a natural key (both clash records' `pair` md5 use it). */
const keyText = (t: string, prefix = '') =>
  `json_build_array(${KEY.map((c) => `${t}.${prefix}${c}`).join(', ')})::text`;
/**
 * SQL: whether the push of natural key `k` is stored with an event id. A scalar subquery, so
 * it stays a primary key probe per row: as NOT EXISTS the planner may make it an anti join
 * over a sequential scan of push_events.
 */
const storedWithId = (k: string) =>
  `coalesce((SELECT true FROM push_events t WHERE ${key('t')} = ${k} AND t.id IS NOT NULL LIMIT 1), false)`;
const pairSql = (a: string, b: string) => `md5(least(${a}, ${b}) || greatest(${a}, ${b}))`;

/** SQL: the side columns of a clash row. */
const sideColumns = (s: 'kept' | 'other') =>
  [...KEY, 'created_at', 'origin', 'mirror'].map((c) => `${s}_${c}`).join(', ');

/** SQL: a recorded clash row (of event_id_clashes, or a RETURNING) as IdClash JSON. */
const clashJson = (t: string) => {
  const sideJson = (s: 'kept' | 'other') =>
    `json_build_object('repositoryId', ${t}.${s}_repository_id::text, 'ref', ${t}.${s}_ref,
      'before', ${t}.${s}_before, 'head', ${t}.${s}_head, 'createdAt', ${t}.${s}_created_at,
      'origin', ${t}.${s}_origin, 'mirror', ${t}.${s}_mirror)`;
  return `json_build_object('eventId', ${t}.event_id::text, 'kind', ${t}.kind,
    'kept', ${sideJson('kept')}, 'other', ${sideJson('other')})`;
};

/**
 * The contender CTEs of the store's one statement, between the batch (`src`: the staging table
 * or the parameter CTE `v`) and the insert. Parameters: $1 origin, $4 mirror id.
 *
 * - `h`: for each batch row with an id, the pushes stored under that id with another natural
 *   key (any era): one index probe a row (never a join whose plan depends on estimates of
 *   a temporary table), and none at all when nothing is stored in the batch's id range (a
 *   fresh archive hour). A re-read finds its own pushes, which are no clash.
 * - `d`: batch rows sharing an id with another batch row (one aggregate over the batch).
 * - `x`: each contender (a batch row with an id whose push is not stored with one already)
 *   and the other push contending for its id (stored, or in the batch), `same_era` or not.
 * - `c`: the contested pushes (a rival in the same era): inserted without their id.
 */
export function contenderCtes(src: string): string {
  const other = `o_repository_id, o_ref, o_before, o_head, o_created_at, o_origin, o_mirror_id, o_stored`;
  return `
    h AS MATERIALIZED (
      SELECT s.id, s.repository_id, s.ref, s.before, s.head, s.created_at,
        q.repository_id AS o_repository_id, q.ref AS o_ref, q.before AS o_before,
        q.head AS o_head, q.created_at AS o_created_at, q.origin AS o_origin,
        q.mirror_id AS o_mirror_id, true AS o_stored
      FROM ${src} s
      CROSS JOIN LATERAL (
        SELECT q.repository_id, q.ref, q.before, q.head, q.created_at, q.origin, q.mirror_id
        FROM push_events q
        WHERE q.id = s.id AND ${key('q')} <> ${key('s')}
      ) q
      WHERE s.id IS NOT NULL
        AND (SELECT EXISTS (
          SELECT 1 FROM push_events r
          WHERE r.id BETWEEN (SELECT min(id) FROM ${src}) AND (SELECT max(id) FROM ${src})))
    ),
    d AS MATERIALIZED (
      SELECT s.id, s.repository_id, s.ref, s.before, s.head, s.created_at
      FROM ${src} s
      WHERE s.id = ANY (ARRAY(
        SELECT id FROM ${src} WHERE id IS NOT NULL GROUP BY id HAVING count(*) > 1))
    ),
    x AS MATERIALIZED (
      SELECT y.*, event_id_era(y.created_at) = event_id_era(y.o_created_at) AS same_era,
        coalesce((SELECT true FROM push_events t WHERE ${key('t')} = ${key('y')} LIMIT 1), false)
          AS key_stored
      FROM (
        SELECT id, repository_id, ref, before, head, created_at, ${other} FROM h
        UNION ALL
        SELECT s.id, s.repository_id, s.ref, s.before, s.head, s.created_at,
          o.repository_id, o.ref, o.before, o.head, o.created_at, $1::text, $4::smallint, false
        FROM d s JOIN d o ON o.id = s.id AND ${key('o')} <> ${key('s')}
      ) y
      WHERE NOT ${storedWithId(key('y'))} AND (y.o_stored OR NOT ${storedWithId(key('y', 'o_'))})
    ),
    c AS (
      SELECT DISTINCT id, repository_id, ref, before, head, created_at, key_stored
      FROM x WHERE same_era
    ),`;
}

/**
 * After the insert `p` (and the fill-in `f`, when there is one): `k` records the reused
 * pairs whose contender took the id, `w` lists the contested pushes for settleDisputes.
 * Parameter $5: the batch's mirror URL (NULL for a poll).
 */
export function recordCtes(withFill: boolean): string {
  const took = (t: string) =>
    `(EXISTS (SELECT 1 FROM p WHERE ${key('p')} = ${key(t)})${
      withFill ? ` OR EXISTS (SELECT 1 FROM f WHERE ${key('f')} = ${key(t)})` : ''
    })`;
  return `,
    k AS (
      INSERT INTO event_id_clashes (event_id, kind, pair, ${sideColumns('kept')}, ${sideColumns('other')})
      SELECT x.id, 'reused', ${pairSql(keyText('x'), keyText('x', 'o_'))},
        x.o_repository_id, x.o_ref, x.o_before, x.o_head, x.o_created_at, x.o_origin,
        (SELECT url FROM archive_mirrors m WHERE m.id = x.o_mirror_id),
        x.repository_id, x.ref, x.before, x.head, x.created_at, $1::text, $5::text
      FROM x
      WHERE NOT x.same_era AND ${took('x')} AND (x.o_stored OR ${key('x', 'o_')} < ${key('x')})
      ON CONFLICT ON CONSTRAINT event_id_clashes_once DO NOTHING
      RETURNING *
    ),
    w AS (SELECT * FROM c WHERE c.key_stored OR ${took('c')})`;
}

/** The final SELECT's columns for `k` and `w`: JSON with every id as text. */
export const CONTENDER_RESULTS = `
  (SELECT coalesce(json_agg(${clashJson('k')}), '[]') FROM k) AS clashes,
  (SELECT coalesce(json_agg(json_build_object('id', w.id::text,
      'repositoryId', w.repository_id::text, 'ref', w.ref, 'before', w.before, 'head', w.head,
      'createdAt', w.created_at)), '[]') FROM w) AS contested`;

interface Candidate extends ClashSide {
  id: string;
  era: number;
  rank: number;
  /** Holds the id now (else: a contested push of this batch, stored without it). */
  holds: boolean;
}

/** Natural key order by code unit (never locale): the same in every process. */
function keyOrder(a: ClashSide, b: ClashSide): number {
  const s = (x: string, y: string) => (x < y ? -1 : x > y ? 1 : 0);
  return (
    compareIds(a.repositoryId, b.repositoryId) ||
    s(a.ref, b.ref) ||
    s(a.before, b.before) ||
    s(a.head, b.head)
  );
}

/** Who keeps a disputed id: the best rank, then the earlier created_at, then the lower key. */
function better(a: Candidate, b: Candidate): number {
  return (
    a.rank - b.rank ||
    new Date(a.createdAt).getTime() - new Date(b.createdAt).getTime() ||
    keyOrder(a, b)
  );
}

/**
 * Settles the ids the store left contested: per (id, era), the best-ranked of the push
 * holding it and this batch's contested pushes keeps it; a holder that loses is stored on
 * without it; each loser is recorded as `disputed`. Call in the store's transaction, right
 * after its statement. Throws EventIdRace if another writer took the id meanwhile.
 */
export async function settleDisputes(
  run: Run,
  contested: readonly ContestedPush[],
  contender: Contender,
): Promise<IdClash[]> {
  if (contested.length === 0) return [];
  const ids = [...new Set(contested.map((c) => c.id))];
  // Stored pushes under these ids, locked in key order (every writer locks in that order).
  const stored = await run<Omit<Candidate, 'holds'>>(
    `SELECT p.id::text AS id, p.repository_id::text AS "repositoryId", p.ref, p.before, p.head,
       p.created_at AS "createdAt", p.origin, m.url AS mirror,
       event_id_era(p.created_at) AS era,
       CASE WHEN p.mirror_id IS NOT NULL THEN coalesce(array_position($2::text[], m.url), ${UNLISTED_RANK})
            WHEN p.origin = 'archive' THEN ${UNLISTED_RANK} ELSE ${POLL_RANK} END AS rank
     FROM push_events p LEFT JOIN archive_mirrors m ON m.id = p.mirror_id
     WHERE p.id = ANY($1::bigint[])
     ORDER BY p.repository_id, p.ref, p.before, p.head
     FOR UPDATE OF p`,
    [ids, contender.mirrors.map(mirrorName)],
  );
  const groups = new Map<string, Candidate[]>();
  const add = (c: Candidate) => {
    const g = `${c.id}@${c.era}`;
    groups.set(g, [...(groups.get(g) ?? []), c]);
  };
  for (const h of stored) add({ ...h, holds: true });
  for (const c of contested) {
    add({
      ...c,
      era: eventIdEra(new Date(c.createdAt)),
      rank: contender.rank,
      origin: contender.origin,
      mirror: contender.mirror,
      holds: false,
    });
  }
  const clear: Candidate[] = [];
  const give: Candidate[] = [];
  const lost: [Candidate, Candidate][] = [];
  for (const g of groups.values()) {
    if (!g.some((c) => !c.holds)) continue;
    const [winner, ...losers] = [...g].sort(better);
    if (!winner!.holds) give.push(winner!);
    for (const l of losers) {
      if (l.holds) clear.push(l);
      lost.push([winner!, l]);
    }
  }
  const keys = (cs: Candidate[]) => [
    cs.map((c) => c.repositoryId),
    cs.map((c) => c.ref),
    cs.map((c) => c.before),
    cs.map((c) => c.head),
  ];
  const byKey = `(p.repository_id, p.ref, p.before, p.head) = (v.repository_id, v.ref, v.before, v.head)`;
  const keyArrays = `$1::bigint[], $2::text[], $3::text[], $4::text[]`;
  // Losers first: the index must not see two holders of one (id, era) at any moment.
  if (clear.length > 0) {
    await run(
      `UPDATE push_events p SET id = NULL
       FROM unnest(${keyArrays}) AS v (repository_id, ref, before, head) WHERE ${byKey}`,
      keys(clear),
    );
  }
  if (give.length > 0) {
    await run(
      `UPDATE push_events p SET id = v.id, mirror_id = $6::smallint
       FROM unnest(${keyArrays}, $5::bigint[]) AS v (repository_id, ref, before, head, id)
       WHERE ${byKey}`,
      [...keys(give), give.map((c) => c.id), contender.mirrorId],
    ).catch((err: unknown) => {
      throw asEventIdRace(err);
    });
  }
  if (lost.length === 0) return [];
  const col = (f: (c: Candidate) => string | null, of: 0 | 1) => lost.map((l) => f(l[of]));
  const sides = (of: 0 | 1) => [
    col((c) => c.repositoryId, of),
    col((c) => c.ref, of),
    col((c) => c.before, of),
    col((c) => c.head, of),
    col((c) => new Date(c.createdAt).toISOString(), of),
    col((c) => c.origin, of),
    col((c) => c.mirror, of),
  ];
  const cols = (from: number) =>
    `$${from}::bigint[], $${from + 1}::text[], $${from + 2}::text[], $${from + 3}::text[],
     $${from + 4}::timestamptz[], $${from + 5}::text[], $${from + 6}::text[]`;
  const recorded = await run<{ clash: IdClash }>(
    `WITH a AS (
       SELECT * FROM unnest($1::bigint[], ${cols(2)}, ${cols(9)})
         AS a (event_id, ${sideColumns('kept')}, ${sideColumns('other')})
     ), i AS (
       INSERT INTO event_id_clashes (event_id, kind, pair, ${sideColumns('kept')}, ${sideColumns('other')})
       SELECT event_id, 'disputed', ${pairSql(keyText('a', 'kept_'), keyText('a', 'other_'))},
         ${sideColumns('kept')}, ${sideColumns('other')}
       FROM a
       ON CONFLICT ON CONSTRAINT event_id_clashes_once DO NOTHING
       RETURNING *
     )
     SELECT ${clashJson('i')} AS clash FROM i`,
    [lost.map(([w]) => w.id), ...sides(0), ...sides(1)],
  );
  return recorded.map((r) => r.clash);
}

const describeSide = (s: ClashSide) =>
  `${s.origin}${s.mirror ? ` ${s.mirror}` : ''} push ${s.repositoryId} ${s.ref} ${s.before.slice(0, 7)}..${s.head.slice(0, 7)} of ${s.createdAt}`;

/**
 * `event.id_clash`, once per clash recorded (after COMMIT): info for a reused id (expected
 * since GitHub's reset), warn for a dispute (someone's data is wrong). Both sides logged.
 */
export function logIdClashes(
  log: Logger,
  clashes: readonly IdClash[],
  context: Record<string, unknown> = {},
): void {
  for (const c of clashes) {
    const fields = {
      event: 'event.id_clash',
      ...context,
      event_id: c.eventId,
      kind: c.kind,
      kept: c.kept,
      other: c.other,
    };
    if (c.kind === 'reused') {
      log.info(
        fields,
        `event id ${c.eventId} reused across eras: ${describeSide(c.other)} stored beside ${describeSide(c.kept)}; both keep the id`,
      );
    } else {
      log.warn(
        fields,
        `event id ${c.eventId} disputed: ${describeSide(c.kept)} keeps it; ${describeSide(c.other)} is stored without it`,
      );
    }
  }
}
