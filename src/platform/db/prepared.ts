import { createHash } from 'node:crypto';
import { type RawBuilder, sql } from 'kysely';
import pg from 'pg';

/**
 * Statements that are dearer to plan than to run, on every poll: the budget state's CTEs
 * (src/budget/window.ts), whose seven lateral scans of github_requests each weigh eight
 * indexes, five of them partial. Planned afresh for every poll they cost more of Postgres's CPU
 * than running them did (docs/performance.md, "Where Postgres's side goes").
 *
 * A statement written with `prepared` becomes a named prepared statement of the session it
 * runs on (parsed once a connection). Naming alone does not stop the planning: with
 * plan_cache_mode `auto` Postgres keeps making custom plans, since a generic plan, blind to
 * the window's bounds, is estimated dearer. So the transaction that runs one asks for generic
 * plans with GENERIC_PLANS (SET LOCAL: it ends with the transaction, and other statements of
 * the session keep custom plans). A generic plan of these statements keeps every scan on its
 * credential's index range (test/integration/hot-path-plans.test.ts holds that; the
 * naming and the plan counts: test/integration/prepared-plans.test.ts).
 *
 * Never `SELECT *` in one: a migration that adds a column under a running process would make
 * every run of it fail ("cached plan must not change result type"). A migration that changes
 * the type of a column one returns does that once a session: PreparingClient then names the
 * session's texts anew.
 *
 * Performance only: a marked statement on a client that is not a PreparingClient runs as any
 * other. In a transaction that did not ask for generic plans it is still named, and Postgres
 * chooses as it does for any prepared statement (custom plans, or the cached generic one
 * after five when that is estimated no dearer).
 */

/** The text a prepared statement starts with: PreparingClient names what starts with it. */
export const PREPARED_MARK = '/* gpi:prepared */ ';

/** `statement` as a named prepared statement of the session it runs on. */
export function prepared<T>(statement: RawBuilder<T>): RawBuilder<T> {
  return sql<T>`${sql.raw(PREPARED_MARK)}${statement}`;
}

/**
 * In a transaction's first statement (beside its locks): the rest of the transaction plans
 * its prepared statements once, generically. Its unnamed statements with parameters get
 * generic plans too, planned at every parse as before: in the transactions that ask (a poll's
 * opening and finalize, a reservation's) they are lookups and updates by key, planned alike
 * either way.
 */
export const GENERIC_PLANS = sql`set_config('plan_cache_mode', 'force_generic_plan', true)`;

/**
 * The digests kept (not a bound on the server: a text seen again is named again). What
 * bounds the server's statements is the set of marked texts, a few dozen (pool size ×
 * purpose × variant), and MAX_NAMED_A_SESSION: a text that varies must never be marked.
 */
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

/** Past this many named statements a session sends the rest unnamed (a marked text that varies). */
const MAX_NAMED_A_SESSION = 256;

/**
 * A named statement that can no longer run on its session: its result type changed under it
 * (0A000, "cached plan must not change result type": a migration altered a column it returns)
 * or the server no longer has it (26000: a DEALLOCATE, a failed bind).
 */
const STALE_STATEMENT = new Set(['0A000', '26000']);

interface SessionNames {
  /** Bumped when one of this session's statements went stale: every text is parsed anew. */
  generation: number;
  named: Set<string>;
}

const sessions = new WeakMap<pg.Client, SessionNames>();

function namesOf(client: pg.Client): SessionNames {
  let s = sessions.get(client);
  if (!s) {
    s = { generation: 0, named: new Set() };
    sessions.set(client, s);
  }
  return s;
}

/** A query's arguments, the marked text's turned into a named statement's config. */
function namedIfMarked(args: unknown[], session: SessionNames): unknown[] {
  const [text, values, ...rest] = args;
  if (typeof text !== 'string' || !text.startsWith(PREPARED_MARK) || !Array.isArray(values)) {
    return args;
  }
  const base = preparedName(text);
  const name = session.generation > 0 ? `${base}_${session.generation}` : base;
  if (!session.named.has(name)) {
    if (session.named.size >= MAX_NAMED_A_SESSION) return args;
    session.named.add(name);
  }
  return [{ name, text, values }, ...rest];
}

const query = pg.Client.prototype.query as (...args: unknown[]) => unknown;

/**
 * The pool's client: a query whose text starts with PREPARED_MARK is sent as a named
 * statement (pg parses it once a connection and binds it after). Everything else is passed
 * through untouched. A named statement that went stale fails its query (and its
 * transaction) once; the session then names every text anew, so the next one parses again.
 */
export class PreparingClient extends pg.Client {}
// Defined on the prototype, not overridden in the class: pg's query() has a dozen overloads.
Object.defineProperty(PreparingClient.prototype, 'query', {
  value(this: pg.Client, ...args: unknown[]) {
    const session = namesOf(this);
    const named = namedIfMarked(args, session);
    if (named === args) return query.apply(this, args);
    const stale = (err: unknown) => {
      if (STALE_STATEMENT.has((err as { code?: string } | null)?.code ?? '')) {
        session.generation++;
        session.named.clear();
      }
    };
    const callback = named[named.length - 1];
    if (typeof callback === 'function') {
      named[named.length - 1] = (err: unknown, result: unknown) => {
        if (err) stale(err);
        return (callback as (e: unknown, r: unknown) => unknown)(err, result);
      };
      return query.apply(this, named);
    }
    return (query.apply(this, named) as Promise<unknown>).catch((err: unknown) => {
      stale(err);
      throw err;
    });
  },
  writable: true,
  configurable: true,
});
