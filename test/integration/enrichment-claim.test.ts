import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { claimNext, claimStatement, releaseClaim } from '../../src/enrichment/claim.ts';
import { ageOut } from '../../src/enrichment/state.ts';
import { createDb } from '../../src/platform/db/pool.ts';
import { backlog, countDue, dueStatement, hasDueWork } from '../../src/work/enrichment-due.ts';
import { useTestDatabase } from '../support/db.ts';
import { explain, type Plan, seqScans } from '../support/plans.ts';
import { entityRow, insertEntities, insertPending, rowText } from './enrichment-fixtures.ts';

const t = useTestDatabase();
const LEASE = 60;
const at = (iso: string) => new Date(iso);

// Tests share one database: each uses its own ids and, where it claims, its own stretch of
// time (passed explicitly: no sleeps), so that no test sees another's rows as due.
describe('claim', () => {
  it('two claimers on separate pools never take the same entity', async () => {
    const ids = await insertPending(t.db, 'actor', 30, { firstId: 1000 });
    const other = createDb(t.newPool(4));
    const now = new Date();
    const claimMany = (db: typeof t.db, who: string) =>
      Promise.all(
        Array.from({ length: 20 }, () =>
          claimNext(db, 'actor', { now, leaseSeconds: LEASE, workerId: who }),
        ),
      );
    const [a, b] = await Promise.all([claimMany(t.db, 'a'), claimMany(other, 'b')]);
    const claimed = [...a, ...b].filter((c) => c !== null).map((c) => c.id);
    expect(claimed).toHaveLength(30);
    expect(new Set(claimed)).toEqual(new Set(ids.map(String)));
    expect(await claimNext(t.db, 'actor', { now, leaseSeconds: LEASE, workerId: 'c' })).toBeNull();
  });

  it('releasing a claim leaves the row byte-identical', async () => {
    await insertEntities(t.db, 'repository', [
      {
        id: 2000,
        next_attempt_at: '2026-01-01T00:00:00.123456Z',
        claimed_until: '2026-01-01T00:01:00.654321Z',
        claimed_by: 'dead-host:1',
        etag: 'W/"abc"',
        attempts: 2,
      },
    ]);
    const before = await rowText(t.db, 'repository', 2000);
    const claim = await claimNext(t.db, 'repository', {
      now: new Date(),
      leaseSeconds: LEASE,
      workerId: 'w',
    });
    expect(claim).toMatchObject({ id: '2000', etag: 'W/"abc"', attempts: 2 });
    expect(await rowText(t.db, 'repository', 2000)).not.toBe(before);
    expect(await releaseClaim(t.db, claim!)).toBe(true);
    expect(await rowText(t.db, 'repository', 2000)).toBe(before);
  });

  it("skips a crashed worker's live lease until it expires, with no cleanup", async () => {
    const now = at('2025-06-01T12:00:00Z');
    await insertEntities(t.db, 'repository', [
      {
        id: 2100,
        next_attempt_at: '2025-06-01T11:00:00Z',
        claimed_until: '2025-06-01T12:00:30Z',
        claimed_by: 'crashed:9',
      },
    ]);
    const opts = { leaseSeconds: LEASE, workerId: 'w' };
    expect(await claimNext(t.db, 'repository', { ...opts, now })).toBeNull();
    expect(await hasDueWork(t.db, 'repository', now)).toBe(false);
    const later = at('2025-06-01T12:00:31Z');
    expect(await hasDueWork(t.db, 'repository', later)).toBe(true);
    const claim = await claimNext(t.db, 'repository', { ...opts, now: later });
    expect(claim?.id).toBe('2100');
    expect(claim?.previous).toMatchObject({ claimedBy: 'crashed:9' });
    const row = await entityRow(t.db, 'repository', 2100);
    expect(row.claimed_by).toBe('w');
    expect(row.claimed_until).toEqual(new Date(later.getTime() + LEASE * 1000));
    await releaseClaim(t.db, claim!);
  });

  it('takes never-enriched rows first (oldest due first), then refreshes; respects next_attempt_at', async () => {
    const now = at('2025-03-01T12:00:00Z');
    await insertEntities(t.db, 'actor', [
      {
        id: 3001,
        enriched_at: '2025-02-01T00:00:00Z',
        etag: '"r"',
        next_attempt_at: '2025-03-01T09:00:00Z',
      },
      { id: 3002, next_attempt_at: '2025-03-01T11:00:00Z' },
      { id: 3003, next_attempt_at: '2025-03-01T10:00:00Z' },
      { id: 3004, next_attempt_at: '2025-03-01T13:00:00Z' }, // backing off: not yet
    ]);
    const order: string[] = [];
    for (;;) {
      const c = await claimNext(t.db, 'actor', { now, leaseSeconds: LEASE, workerId: 'w' });
      if (!c) break;
      order.push(c.id);
      if (c.id === '3001') expect(c).toMatchObject({ refresh: true, etag: '"r"' });
    }
    expect(order).toEqual(['3003', '3002', '3001']);
  });
});

describe('age-out sweep', () => {
  it('turns enriched rows older than the TTL into pending refreshes, keeping etag and profile', async () => {
    const now = at('2026-11-29T12:00:00Z');
    const ttl = 7 * 86400;
    await insertEntities(t.db, 'repository', [
      {
        id: 4001,
        enrichment_state: 'enriched',
        enriched_at: '2026-11-20T00:00:00Z',
        etag: '"old"',
      },
      {
        id: 4002,
        enrichment_state: 'enriched',
        enriched_at: '2026-11-28T00:00:00Z',
        etag: '"fresh"',
      },
      { id: 4003, enrichment_state: 'gone', enriched_at: '2026-10-01T00:00:00Z' },
    ]);
    expect(await countDue(t.db, 'repository', now, ttl)).toBeGreaterThanOrEqual(1);
    expect(await ageOut(t.db, 'repository', { now, ttlSeconds: ttl })).toBe(1);
    expect(await entityRow(t.db, 'repository', 4001)).toMatchObject({
      enrichment_state: 'pending',
      etag: '"old"',
      enriched_at: at('2026-11-20T00:00:00Z'),
      attempts: 0,
    });
    expect((await entityRow(t.db, 'repository', 4002)).enrichment_state).toBe('enriched');
    expect((await entityRow(t.db, 'repository', 4003)).enrichment_state).toBe('gone');
    expect(await ageOut(t.db, 'repository', { now, ttlSeconds: ttl })).toBe(0);
  });
});

describe('due work and backlog', () => {
  it('counts pending rows that are due and unleased, and aged-out enriched rows', async () => {
    // A fresh database per file, but other tests above share it: use a far-past clock
    // where only this test's rows exist in range.
    const now = at('2001-01-01T00:00:00Z');
    const ttl = 86400;
    const base = { next_attempt_at: '2000-12-31T00:00:00Z', first_seen_at: '2000-12-31T00:00:00Z' };
    expect(await hasDueWork(t.db, 'actor', at('2000-01-01T00:00:00Z'), ttl)).toBe(false);
    await insertEntities(t.db, 'actor', [
      { id: 5001, ...base },
      { id: 5002, ...base, claimed_until: '2001-01-01T00:05:00Z', claimed_by: 'x' },
      { id: 5003, ...base, next_attempt_at: '2001-01-02T00:00:00Z' },
      { id: 5004, ...base, enrichment_state: 'enriched', enriched_at: '2000-12-30T00:00:00Z' },
      { id: 5005, ...base, enrichment_state: 'failed' },
    ]);
    expect(await countDue(t.db, 'actor', now, ttl)).toBe(2); // 5001 and 5004
    expect(await hasDueWork(t.db, 'actor', now, ttl)).toBe(true);
    const b = await backlog(t.db, now, ttl);
    expect(b.actor.failed).toBeGreaterThanOrEqual(1);
    expect(b.actor.due).toBe(2);
    expect(Object.keys(b)).toEqual(['actor', 'repository']);
  });
});

describe('query plans at scale', () => {
  it('claim and the due check use the partial indexes, never a seq scan', async () => {
    // 100k enriched repositories + 1% pending, analyzed: the shape of the 1M benchmark.
    await sql`
      INSERT INTO repositories (id, full_name, enrichment_state, enriched_at, first_seen_at, next_attempt_at)
      SELECT g, 'o/r' || g, CASE WHEN g % 100 = 0 THEN 'pending' ELSE 'enriched' END,
             CASE WHEN g % 100 = 0 THEN NULL ELSE now() - interval '1 day' END,
             now() - interval '2 days', now() - interval '1 hour'
      FROM generate_series(1000000, 1099999) g`.execute(t.db);
    await sql`ANALYZE repositories`.execute(t.db);
    const now = new Date();
    const plans: Plan[] = [];
    for (const refresh of [false, true]) {
      const stmt = claimStatement('repository', refresh, new Date(now.getTime() + 60_000), {
        now,
        leaseSeconds: 60,
        workerId: 'w',
      });
      plans.push(await explain(t.db, stmt));
    }
    plans.push(await explain(t.db, dueStatement('repository', now, 7 * 86400)));
    for (const plan of plans) {
      expect(seqScans(plan), plan.shown).toEqual([]);
      const indexScans = plan.nodes.filter(
        (n) =>
          ['Index Scan', 'Index Only Scan'].includes(n['Node Type']) &&
          n['Index Name']?.startsWith('repositories_'),
      );
      expect(indexScans, plan.shown).not.toEqual([]);
    }
  });
});
