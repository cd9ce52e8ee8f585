import type { CommitEmailMode } from '../platform/config/config.ts';
import { isContentRefusal, sqlState } from '../platform/db/errors.ts';
import type { Db } from '../platform/db/pool.ts';
import { inSavepoint } from '../platform/db/savepoint.ts';
import { sessionOf } from '../platform/db/session.ts';
import { commitsTargetsFor } from '../store/commits-targets.ts';
import { EventIdRace, RACE_RETRIES, runOnClient } from '../store/event-ids.ts';
import type { MappedPage, PushRow } from '../store/mapping.ts';
import type { StoreResult } from '../store/pushes.ts';
import { bulkStorePage } from '../store/pushes.ts';
import { type RejectionRow, storeRejectedEvents } from '../store/rejected-events.ts';

/**
 * One page in ONE transaction: its good pushes stored, its rejected events set
 * aside, and whatever the caller adds (run counters) — all or nothing. Should the database
 * refuse the page for its content anyway (something the rules in src/store/rules.ts
 * did not foresee), the page is written again one push at a time, each in a savepoint, and
 * the pushes the database refuses are set aside as `store_failed`: a page never fails for
 * content, and the common case pays nothing for the fallback. A page that met another
 * writer storing a push under one of its event ids (EventIdRace, ADR 0122) is stored again
 * whole: the second time it sees that push.
 */

/** Runs `attempt` again (a new transaction) while it meets an EventIdRace, a few times. */
async function untilNoRace<T>(attempt: () => Promise<T>): Promise<T> {
  for (let races = 0; ; races++) {
    try {
      return await attempt();
    } catch (err) {
      if (!(err instanceof EventIdRace) || races >= RACE_RETRIES) throw err;
    }
  }
}

export interface PageContext {
  sourceId: string | number | null;
  runId: number | null;
  /** COMMIT_EMAILS for inline commits (GHES-shaped events); default hash. */
  commitEmails?: CommitEmailMode;
  /**
   * Where to read (and cache) who gets commits, when the page is stored on a connection of
   * its own: the cache is per Kysely instance, and a poll's session is a new one each run.
   */
  targetsFrom?: Db;
  /** No credential in this process (commitsOffReason): covered pushes wait for one. */
  commitsOff?: boolean;
}

export interface StoredPage extends StoreResult {
  /** Events of this page set aside (first time or again). */
  rejected: number;
  /** Set aside for the first time: log each once, after COMMIT. */
  firstSeen: RejectionRow[];
}

function rejectionRow(ctx: PageContext, r: Omit<RejectionRow, 'sourceId' | 'runId'>): RejectionRow {
  return { sourceId: ctx.sourceId, runId: ctx.runId, ...r };
}

/** What we tried to store, as an event, for the record. */
function asEvent(p: PushRow): Record<string, unknown> {
  return {
    id: p.id,
    type: 'PushEvent',
    actor: { id: p.actor.id, login: p.actor.login },
    repo: { id: p.repository.id, name: p.repository.fullName },
    created_at: p.createdAt.toISOString(),
    payload: p.payload,
  };
}

export async function storePage<T>(
  db: Db,
  page: MappedPage,
  ctx: PageContext,
  within: (trx: Db, stored: StoredPage) => Promise<T>,
): Promise<{ stored: StoredPage; result: T }> {
  const session = sessionOf(db);
  const opts = {
    origin: 'poll' as const,
    // A poll's own session: the merge is a prepared statement of it.
    ...(session ? { session: runOnClient(session) } : {}),
    sourceId: ctx.sourceId === null ? null : Number(ctx.sourceId),
    runId: ctx.runId,
    // Who gets commits: read once per batch (cached), never per push.
    commits: {
      targets: await commitsTargetsFor(ctx.commitsOff === true, ctx.targetsFrom ?? db),
      emails: ctx.commitEmails ?? 'hash',
    },
  };
  const rejected = page.rejected.map(({ eventId, eventType, reason, message, raw }) =>
    rejectionRow(ctx, { eventId, eventType, reason, message, raw }),
  );
  try {
    return await untilNoRace(() =>
      db.transaction().execute(async (trx) => {
        // The bulk merge: one statement for actors, repositories and pushes.
        const s = await bulkStorePage(trx, page.pushes, opts);
        const q = await storeRejectedEvents(trx, rejected, opts.commits.emails);
        const stored = { ...s, rejected: rejected.length, firstSeen: q.firstSeen };
        return { stored, result: await within(trx, stored) };
      }),
    );
  } catch (err) {
    if (!isContentRefusal(err)) throw err;
  }
  return untilNoRace(() => storeOneByOne(db, page, ctx, opts, rejected, within));
}

/** The fallback: each push in a savepoint, the refused ones set aside as `store_failed`. */
function storeOneByOne<T>(
  db: Db,
  page: MappedPage,
  ctx: PageContext,
  opts: Parameters<typeof bulkStorePage>[2],
  rejected: RejectionRow[],
  within: (trx: Db, stored: StoredPage) => Promise<T>,
): Promise<{ stored: StoredPage; result: T }> {
  const emails = opts.commits?.emails ?? 'hash';
  return db.transaction().execute(async (trx) => {
    const stored: StoredPage = {
      created: 0,
      newActors: 0,
      newRepositories: 0,
      commitsPending: 0,
      clashes: [],
      rejected: 0,
      firstSeen: [],
    };
    const refusedRows = [...rejected];
    for (const push of page.pushes) {
      const r = await inSavepoint(trx, () => bulkStorePage(trx, [push], opts));
      if ('ok' in r) {
        stored.created += r.ok.created;
        stored.newActors += r.ok.newActors;
        stored.newRepositories += r.ok.newRepositories;
        stored.commitsPending += r.ok.commitsPending;
        stored.clashes.push(...r.ok.clashes);
      } else {
        refusedRows.push(
          rejectionRow(ctx, {
            eventId: push.id,
            eventType: 'PushEvent',
            reason: 'store_failed',
            message: `the database refused it (SQLSTATE ${sqlState(r.refused)}): ${(r.refused as Error).message}`,
            raw: asEvent(push),
          }),
        );
      }
    }
    for (const row of refusedRows) {
      let q = await inSavepoint(trx, () => storeRejectedEvents(trx, [row], emails));
      // Even the record of it was refused: keep the fact and the reason, without the event.
      if ('refused' in q) {
        const bare = {
          ...row,
          raw: null,
          message: `${row.message} (event not storable: kept without raw)`,
        };
        q = { ok: await storeRejectedEvents(trx, [bare], emails) };
      }
      stored.rejected++;
      stored.firstSeen.push(...q.ok.firstSeen);
    }
    return { stored, result: await within(trx, stored) };
  });
}
