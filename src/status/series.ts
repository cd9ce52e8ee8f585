import { sql } from 'kysely';
import { REQUEST_PURPOSES, type RequestPurpose } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';

/**
 * Per-minute counts over the last hours for the status page charts. Both reads are range
 * scans on BRIN indexes (push_events.ingested_at, github_requests.reserved_at; migration
 * 2026-11-29T0920), so a long history costs nothing here.
 */

export interface MinuteSeries {
  /** The first minute (UTC, truncated); point i is minute start + i. */
  start: Date;
  minutes: number;
  /** push_events rows ingested (poll or webhook) per minute. */
  eventsIngested: number[];
  /** Requests that spent quota per minute, per purpose (a 304 spends none). */
  requestsSpent: Record<RequestPurpose, number[]>;
}

export const DEFAULT_SERIES_MINUTES = 180;

function minuteIndex(start: Date, at: Date): number {
  return Math.round((at.getTime() - start.getTime()) / 60_000);
}

export async function minuteSeries(
  db: Db,
  now: Date,
  minutes = DEFAULT_SERIES_MINUTES,
): Promise<MinuteSeries> {
  const currentMinute = Math.floor(now.getTime() / 60_000) * 60_000;
  const start = new Date(currentMinute - (minutes - 1) * 60_000);
  const zeros = () => new Array<number>(minutes).fill(0);
  const out: MinuteSeries = {
    start,
    minutes,
    eventsIngested: zeros(),
    requestsSpent: Object.fromEntries(REQUEST_PURPOSES.map((p) => [p, zeros()])) as Record<
      RequestPurpose,
      number[]
    >,
  };

  const events = await sql<{ minute: Date; n: string }>`
    SELECT date_trunc('minute', ingested_at) AS minute, count(*) AS n
    FROM push_events WHERE ingested_at >= ${start}
    GROUP BY 1`.execute(db);
  for (const row of events.rows) {
    const i = minuteIndex(start, row.minute);
    if (i >= 0 && i < minutes) out.eventsIngested[i] = Number(row.n);
  }

  const requests = await sql<{ minute: Date; purpose: RequestPurpose; n: string }>`
    SELECT date_trunc('minute', reserved_at) AS minute, purpose, count(*) AS n
    FROM github_requests WHERE reserved_at >= ${start} AND counted
    GROUP BY 1, 2`.execute(db);
  for (const row of requests.rows) {
    const i = minuteIndex(start, row.minute);
    // A purpose this build does not know (a newer process's) is left out, not a crash.
    const perMinute = out.requestsSpent[row.purpose];
    if (perMinute && i >= 0 && i < minutes) perMinute[i] = Number(row.n);
  }
  return out;
}
