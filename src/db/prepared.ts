import { createHash } from 'node:crypto';
import { type RawBuilder, sql } from 'kysely';
import pg from 'pg';

/**
 * Statements that are dearer to plan than to run, on every poll: the budget state's CTEs
 * (src/github/budget-state.ts), whose seven lateral scans of github_requests each weigh eight
 * indexes, five of them partial. Planned afresh for every poll they cost more of Postgres's CPU
 * than running them did (docs/performance.md, "Where Postgres's side goes").
 *
 * A statement written with `prepared` becomes a named prepared statement of the session it
 * runs on (parsed once a connection). Naming alone does not stop the planning: with
 * plan_cache_mode `auto` Postgres keeps making custom plans, since a generic plan, blind to
 * the window's bounds, is estimated dearer. So the transaction that runs one asks for generic
 * plans with GENERIC_PLANS (SET LOCAL: it ends with the transaction, and other statements of
 * the session keep custom plans). A generic plan of these statements keeps every scan on its
 * credential's index range (test/integration/prepared-plans.test.ts holds that).
 *
 * Never `SELECT *` in one: a cached plan whose result columns change (a migration adding a
 * column under a running process) fails the statement instead of being planned again.
 *
 * Performance only: a marked statement run elsewhere (a pool whose clients are not
 * PreparingClient, a transaction that did not ask for generic plans) runs as any other.
 */

/** The text a prepared statement starts with: PreparingClient names what starts with it. */
export const PREPARED_MARK = '/* gpi:prepared */ ';

/** `statement` as a named prepared statement of the session it runs on. */
export function prepared<T>(statement: RawBuilder<T>): RawBuilder<T> {
  return sql<T>`${sql.raw(PREPARED_MARK)}${statement}`;
}

/**
 * In a transaction's first statement (beside its locks): the rest of the transaction plans
 * its prepared statements once, generically. An unnamed statement is planned at every parse
 * whatever this says, so for the others nothing changes but the kind of plan: those of the
 * poll's transactions are lookups by key, planned alike either way.
 */
export const GENERIC_PLANS = sql`set_config('plan_cache_mode', 'force_generic_plan', true)`;

/** At most this many texts are named per process (the budget statements have a few dozen). */
const MAX_NAMES = 512;
const names = new Map<string, string>();

/** The statement's name: a digest of its text, so one name never stands for two texts. */
export function preparedName(text: string): string {
  let name = names.get(text);
  if (name === undefined) {
    name = `gpi_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
    if (names.size >= MAX_NAMES) names.delete(names.keys().next().value!);
    names.set(text, name);
  }
  return name;
}

/** A query's arguments, the marked text's turned into a named statement's config. */
export function namedIfMarked(args: unknown[]): unknown[] {
  const [text, values, ...rest] = args;
  if (typeof text !== 'string' || !text.startsWith(PREPARED_MARK) || !Array.isArray(values)) {
    return args;
  }
  return [{ name: preparedName(text), text, values }, ...rest];
}

const query = pg.Client.prototype.query as (...args: unknown[]) => unknown;

/**
 * The pool's client: a query whose text starts with PREPARED_MARK is sent as a named
 * statement (pg parses it once a connection and binds it after). Everything else is passed
 * through untouched.
 */
export class PreparingClient extends pg.Client {}
// Defined on the prototype, not overridden in the class: pg's query() has a dozen overloads.
Object.defineProperty(PreparingClient.prototype, 'query', {
  value(this: pg.Client, ...args: unknown[]) {
    return query.apply(this, namedIfMarked(args));
  },
  writable: true,
  configurable: true,
});
