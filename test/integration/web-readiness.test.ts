import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createReadinessProbe,
  READINESS_APPLICATION_NAME,
  READINESS_TIMEOUT_MS,
} from '../../src/web/readiness.ts';
import { useTestDatabase } from '../support/db.ts';
import { waitFor } from '../support/wait.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * /readyz answers within its own timeout: a check the database does not
 * answer is a 503 by READINESS_TIMEOUT_MS, and callers meanwhile share the one check in
 * flight instead of each opening a connection. Here the database is stuck for the check by
 * a lock it needs (test/recovery/readyz-frozen.test.ts freezes a whole server).
 */

const t = useTestDatabase();
let web: TestWeb;

beforeAll(async () => {
  web = await startTestWeb(t);
});
afterAll(async () => {
  await web?.close();
});

async function readyz() {
  const res = await fetch(`${web.url}/readyz`);
  return { status: res.status, body: (await res.json()) as { ready: boolean; reason?: string } };
}

/** The readiness check's own connections on this database, and how many wait for a lock. */
async function checks(admin: pg.Client) {
  const r = await admin.query<{ n: number; waiting: number }>(
    `SELECT count(*)::int AS n, count(*) FILTER (WHERE wait_event_type = 'Lock')::int AS waiting
       FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`,
    [t.name, READINESS_APPLICATION_NAME],
  );
  return r.rows[0]!;
}

describe('GET /readyz against a database that does not answer', () => {
  it('is a 503 within its own timeout, one check shared by every caller, then 200 once it answers', async () => {
    expect((await readyz()).status).toBe(200);
    const holder = new pg.Client({ connectionString: t.url });
    const admin = new pg.Client({ connectionString: t.url });
    await holder.connect();
    await admin.connect();
    try {
      // The migrations table, locked as a long migration or a stuck DDL would hold it.
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE kysely_migration IN ACCESS EXCLUSIVE MODE');

      const first = readyz();
      // The check is in and waits for the lock: that is the hung database, as the check sees it.
      await waitFor(async () => (await checks(admin)).waiting === 1, {
        what: 'the readiness check to wait for the lock',
      });
      // Everyone asking meanwhile shares that check: still one connection.
      const more = Array.from({ length: 8 }, () => readyz());
      const answers = await Promise.all([first, ...more]);
      for (const a of answers) {
        expect(a.status).toBe(503);
        expect(a.body.ready).toBe(false);
        expect(a.body.reason).toMatch(
          new RegExp(`no answer within ${READINESS_TIMEOUT_MS} ms|statement timeout|lock timeout`),
        );
      }
      expect(new Set(answers.map((a) => a.body.reason)).size).toBe(1);
      // The check that ran out of time took its connection with it.
      await waitFor(async () => (await checks(admin)).n === 0, {
        what: 'the readiness connection to be gone',
      });

      await holder.query('ROLLBACK');
      expect(await readyz()).toEqual({ status: 200, body: { ready: true } });
      // And the answered check leaves no connection either. Its socket is cut, not closed
      // politely, so the server lists the backend until it has read the end of it: a moment,
      // longer on a loaded machine (a fresh-clone CI run saw it listed just after the 200).
      await waitFor(async () => (await checks(admin)).n === 0, {
        what: "the answered check's connection to be gone",
      });
    } finally {
      await holder.end();
      await admin.end();
    }
  });

  it('callers while a check hangs share it: one connection however many ask', async () => {
    // A timeout far beyond the test, so the sharing, not the deadline, is what is seen.
    const probe = createReadinessProbe({
      config: web.config,
      db: t.db,
      databaseUrl: t.url,
      timeoutMs: 600_000,
    });
    const holder = new pg.Client({ connectionString: t.url });
    const admin = new pg.Client({ connectionString: t.url });
    await holder.connect();
    await admin.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE kysely_migration IN ACCESS EXCLUSIVE MODE');
      const first = probe.check();
      await waitFor(async () => (await checks(admin)).waiting === 1, {
        what: 'the readiness check to wait for the lock',
      });
      const more = Array.from({ length: 20 }, () => probe.check());
      expect(more.every((p) => p === first)).toBe(true);
      expect(await checks(admin)).toEqual({ n: 1, waiting: 1 });
      await holder.query('ROLLBACK');
      for (const r of await Promise.all([first, ...more])) expect(r).toEqual({ ready: true });
      await waitFor(async () => (await checks(admin)).n === 0, {
        what: 'the readiness connection to be gone',
      });
    } finally {
      await holder.end();
      await admin.end();
    }
  });
});
