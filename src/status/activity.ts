import { sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';
import { pushMinuteCounts, readPushTallies } from '../store/push-tallies.ts';
import { type RejectedSummary, rejectedSummary } from '../store/rejected-events.ts';
import { REJECTION_REASONS } from '../store/rules.ts';
import { routingLabel } from '../webhooks/events.ts';
import { runsInWindow } from './run-hours.ts';

/** Totals across sources and the webhook intake over the last 24 hours. */
export interface IngestActivity {
  /**
   * push_events rows held, by how each push first arrived; of the last 24 hours, the pushes
   * that arrived (were stored: `last24h`, by ingested_at) and that were pushed (by the
   * event's own time, created_at: what coverage and GH Archive's hours count). A backfill
   * of old hours arrives now and was pushed then; both are named where they are shown.
   */
  pushes: {
    total: number;
    poll: number;
    webhook: number;
    archive: number;
    last24h: number;
    pushedLast24h: number;
  };
  /**
   * Runs of the last 24 hours by outcome ('running' counts the ones in flight): the current
   * UTC hour and the 23 before it, from the hourly rollups (run-hours.ts).
   */
  runsLast24h: Record<string, number>;
  gapsLast24h: number;
  /** Polled events rejected (rejected_events), by reason. */
  rejected: RejectedSummary;
  webhooks: {
    /** Deliveries in the last 24 hours by routing ('push:created', 'ignored:issues', 'rejected:malformed', ...). */
    last24h: Record<string, number>;
    /** Redeliveries in the last 24 hours whose body differed from the first delivery's. */
    mismatchedRedeliveries24h: number;
    lastReceivedAt: Date | null;
  };
}

/**
 * The pushes of the last 24 hours by origin, by arrival (ingested_at) and by the event's own
 * time (created_at), in whole UTC minutes from the one `since` falls in: sums of the minute
 * tallies (store/push-tallies.ts), bounded by the statements of a day, never by the pushes a
 * backfill brought in that day.
 */
export function pushesSinceStatements(since: Date) {
  return {
    arrived: pushMinuteCounts('arrived', since),
    pushed: pushMinuteCounts('pushed', since),
  };
}

export async function ingestActivity(db: Db, now: Date): Promise<IngestActivity> {
  const since = new Date(now.getTime() - 86_400_000);
  // The totals from the tallies (months × origins × states), never a count of push_events.
  const held = await readPushTallies(db);
  const recent = pushesSinceStatements(since);
  const arrived = (await recent.arrived.execute(db)).rows;
  const pushed = (await recent.pushed.execute(db)).rows;
  const runs = await runsInWindow(db, now);
  const deliveries = await sql<{ routing: string; n: string; last: Date }>`
    SELECT routing, count(*) AS n, max(received_at) AS last
    FROM webhook_deliveries WHERE received_at > ${since} GROUP BY routing`.execute(db);
  const lastDelivery = await sql<{ last: Date | null; mismatched: string | null }>`
    SELECT max(received_at) AS last,
           sum(redelivery_mismatches) FILTER (WHERE last_redelivered_at > ${since}) AS mismatched
    FROM webhook_deliveries`.execute(db);

  const out: IngestActivity = {
    pushes: { total: 0, poll: 0, webhook: 0, archive: 0, last24h: 0, pushedLast24h: 0 },
    runsLast24h: {},
    gapsLast24h: 0,
    rejected: await rejectedSummary(db, now),
    webhooks: {
      last24h: {},
      lastReceivedAt: lastDelivery.rows[0]?.last ?? null,
      mismatchedRedeliveries24h: Number(lastDelivery.rows[0]?.mismatched ?? 0),
    },
  };
  for (const t of held) {
    out.pushes[t.origin] += t.pushes;
    out.pushes.total += t.pushes;
  }
  for (const row of arrived) out.pushes.last24h += Number(row.n);
  for (const row of pushed) out.pushes.pushedLast24h += Number(row.n);
  out.runsLast24h = runs.byStatus;
  out.gapsLast24h = runs.gaps;
  for (const row of deliveries.rows) {
    // Bounded keys: a routing from client input is folded into the fixed set.
    const key = routingLabel(row.routing, REJECTION_REASONS);
    out.webhooks.last24h[key] = (out.webhooks.last24h[key] ?? 0) + Number(row.n);
  }
  return out;
}
