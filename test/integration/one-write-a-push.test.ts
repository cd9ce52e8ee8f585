import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { Db } from '../../src/platform/db/pool.ts';
import type { PushRow } from '../../src/store/mapping.ts';
import {
  bulkStorePage,
  bulkStoreStaged,
  dropStage,
  insertStagedEntities,
  prepareStage,
} from '../../src/store/pushes.ts';
import { StageBatch } from '../../src/store/stage-batch.ts';
import { useTestDatabase } from '../support/db.ts';
import { pushRow } from '../support/push-rows.ts';

/**
 * A push that arrives with its commits (an archive line before 2025-10, a webhook delivery)
 * is inserted with its list (src/store/inline-commits.ts insertedList): its push_events row
 * is written once, never inserted and then updated by the list's statement — an update
 * left a dead version and a new entry in every index of the partition for each push. Counted
 * by the transaction's own statistics (pg_stat_xact_user_tables), before it commits.
 */

const t = useTestDatabase();
let n = 0;
const sha = () => (++n).toString(16).padStart(40, 'c');

/** A pre-2025-10 push carrying all its `count` commits, `distinct` given unless said. */
function carrying(count: number, distinct: (i: number) => boolean | undefined): PushRow {
  const shas = Array.from({ length: count }, sha);
  const head = shas.at(-1)!;
  const commits = shas.map((s, i) => ({
    sha: s,
    author: { email: `a${i}@example.com`, name: `A ${i}` },
    message: `commit ${i}`,
    ...(distinct(i) === undefined ? {} : { distinct: distinct(i) }),
  }));
  return pushRow({
    head,
    size: count,
    distinctSize: count,
    createdAt: new Date(Date.UTC(2015, 0, 1, 15, 0, n % 60)),
    payload: { ref: 'refs/heads/main', head, before: '0'.repeat(40), size: count, commits },
  });
}

async function writes(db: Db): Promise<{ inserted: number; updated: number }> {
  const r = await sql<{ ins: string; upd: string }>`
    SELECT coalesce(sum(n_tup_ins), 0) AS ins, coalesce(sum(n_tup_upd), 0) AS upd
    FROM pg_stat_xact_user_tables WHERE relname LIKE 'push\\_events\\_%'`.execute(db);
  return { inserted: Number(r.rows[0]!.ins), updated: Number(r.rows[0]!.upd) };
}

async function listOf(p: PushRow): Promise<{ sha: string; distinct: boolean | null }[]> {
  const r = await sql<{ sha: string; distinct: boolean | null }>`
    SELECT sha, "distinct" FROM push_commits
    WHERE repository_id = ${p.repository.id} AND head = ${p.head} ORDER BY position`.execute(t.db);
  return r.rows;
}

const given = (p: PushRow) =>
  (p.payload.commits as { sha: string; distinct?: boolean }[]).map((c) => ({
    sha: c.sha,
    distinct: c.distinct ?? null,
  }));

describe('a push that carries its commits is written once', () => {
  it('an archive chunk: every push inserted with its list, none updated', async () => {
    const pushes = [carrying(1, () => true), carrying(3, (i) => i !== 1), carrying(20, () => true)];
    const batch = new StageBatch();
    for (const p of pushes) batch.add(p, null, undefined, { source: 'archive', emails: 'keep' });
    const entityClient = await t.pool.connect();
    const client = await t.pool.connect();
    try {
      await insertStagedEntities(entityClient, batch);
      await prepareStage(client);
      await client.query('BEGIN');
      const r = await bulkStoreStaged(client, batch, {});
      expect(r.created).toBe(3);
      const stats = await client.query<{ ins: string; upd: string }>(
        `SELECT coalesce(sum(n_tup_ins), 0) AS ins, coalesce(sum(n_tup_upd), 0) AS upd
         FROM pg_stat_xact_user_tables WHERE relname LIKE 'push\\_events\\_%'`,
      );
      expect({ ins: Number(stats.rows[0]!.ins), upd: Number(stats.rows[0]!.upd) }).toEqual({
        ins: 3,
        upd: 0,
      });
      await client.query('COMMIT');
    } finally {
      await dropStage(client);
      client.release();
      entityClient.release();
    }
    for (const p of pushes) expect(await listOf(p)).toEqual(given(p));
    const states = await sql<{ commits_state: string }>`
      SELECT commits_state FROM push_events WHERE head = ANY (${pushes.map((p) => p.head)})`.execute(
      t.db,
    );
    expect(states.rows.map((s) => s.commits_state)).toEqual(['complete', 'complete', 'complete']);
  });

  it('a page: inserted with its list, none updated; a list whose distinct is not given is still derived', async () => {
    const once = carrying(2, () => false);
    const derived = carrying(2, () => undefined);
    await t.db.transaction().execute(async (trx) => {
      await bulkStorePage(trx, [once], { origin: 'webhook' });
      expect(await writes(trx)).toEqual({ inserted: 1, updated: 0 });
      // Its distinct is decided against the commits held: the list's statement writes it.
      await bulkStorePage(trx, [derived], { origin: 'webhook' });
      expect(await writes(trx)).toEqual({ inserted: 2, updated: 1 });
    });
    expect(await listOf(once)).toEqual(given(once));
    expect(await listOf(derived)).toEqual(given(derived).map((c) => ({ ...c, distinct: true })));
  });
});
