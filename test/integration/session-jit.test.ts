import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createPool } from '../../src/platform/db/pool.ts';
import { useTestDatabase } from '../support/db.ts';

/**
 * Every session a pool of ours opens runs without JIT (src/platform/db/pool.ts SESSION_SETUP, ADR 0176):
 * a poll's page merge, estimated blind, passed jit_above_cost on a table of some tens of
 * thousands of pushes and spent 2.5-4 s compiling a statement that ran in 5 ms, with the
 * credential's gate held. Checked on the session itself, from the very first query a checkout
 * sends, and as the absence of JIT in the plan of a statement the server would compile.
 */

const t = useTestDatabase();

// With jit_above_cost at 0 the server plans JIT for any statement: only `jit` itself stops it.
const COMPILED_ANYWHERE = `EXPLAIN (FORMAT JSON) SELECT count(*) FROM generate_series(1, 10) g`;

async function planHasJit(client: pg.ClientBase | pg.Pool): Promise<boolean> {
  await client.query('SET jit_above_cost = 0');
  const r = await client.query<{ 'QUERY PLAN': { JIT?: unknown }[] }>(COMPILED_ANYWHERE);
  return r.rows[0]!['QUERY PLAN'][0]!.JIT !== undefined;
}

describe('sessions without JIT', () => {
  it("a pool's every new session has jit off before the checkout's first query", async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    const pool = createPool(t.url, { max: 3, applicationName: 'test-jit' });
    const other = createPool(t.url, { max: 1, applicationName: 'test-jit' });
    try {
      // Three checkouts at once: three new sessions, each asked straight away.
      const clients = await Promise.all([pool.connect(), pool.connect(), pool.connect()]);
      try {
        const answers = await Promise.all(clients.map((c) => c.query<{ jit: string }>('SHOW jit')));
        expect(answers.map((a) => a.rows[0]!.jit)).toEqual(['off', 'off', 'off']);
      } finally {
        for (const c of clients) c.release();
      }
      // A new session through the pool's own query (a checkout and a release inside).
      expect((await other.query<{ jit: string }>('SHOW jit')).rows[0]!.jit).toBe('off');
      // Set up before it is handed out, not queued beside the checkout's query (node-postgres
      // warns of a query sent while another runs).
      expect(warnings.map((w) => w.message)).toEqual([]);
    } finally {
      process.off('warning', onWarning);
      await Promise.all([pool.end(), other.end()]);
    }
  });

  it('a statement the server would compile is not compiled on our session', async () => {
    const plain = new pg.Client({ connectionString: t.url });
    await plain.connect();
    let available: boolean;
    let serverCompiles: boolean;
    try {
      expect((await plain.query<{ jit: string }>('SHOW jit')).rows[0]!.jit).toBe('on');
      available = (await plain.query<{ a: boolean }>('SELECT pg_jit_available() AS a')).rows[0]!.a;
      serverCompiles = await planHasJit(plain);
    } finally {
      await plain.end();
    }
    // A build without LLVM never compiles; one with it does, on a plain session.
    expect(serverCompiles).toBe(available);
    const pool = createPool(t.url, { max: 1, applicationName: 'test-jit' });
    try {
      expect(await planHasJit(pool)).toBe(false);
    } finally {
      await pool.end();
    }
  });
});
