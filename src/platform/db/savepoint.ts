import { sql } from 'kysely';
import { isContentRefusal } from './errors.ts';
import type { Db } from './pool.ts';

/**
 * Runs `work` inside a savepoint of the caller's transaction. When the database refuses
 * its rows for their content (isContentRefusal) only the savepoint is rolled back and the
 * refusal returned, so the transaction goes on to record what happened; any other error
 * is thrown (the whole transaction is lost, and the caller answers or retries as for an
 * outage).
 */
export async function inSavepoint<T>(
  trx: Db,
  work: () => Promise<T>,
): Promise<{ ok: T } | { refused: unknown }> {
  await sql`SAVEPOINT content_refusal`.execute(trx);
  try {
    const ok = await work();
    await sql`RELEASE SAVEPOINT content_refusal`.execute(trx);
    return { ok };
  } catch (err) {
    if (!isContentRefusal(err)) throw err;
    await sql`ROLLBACK TO SAVEPOINT content_refusal`.execute(trx);
    return { refused: err };
  }
}
