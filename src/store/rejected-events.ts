import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import type { CommitEmailMode } from '../platform/config/config.ts';
import type { Db } from '../platform/db/pool.ts';
import { MAX_JSON_DEPTH } from '../platform/json/bounded.ts';
import { exactId, TooDeepJson } from '../platform/json/exact.ts';
import { inspectJson, storableCopy, storableText } from '../platform/json/walk.ts';
import type { Logger } from '../platform/log.ts';
import { jsonUnderPolicy, textUnderPolicy } from './commit-emails.ts';
import { parseTimestamp } from './rules.ts';

/**
 * rejected_events: events rejected instead of stored (ADR 0020). Any path that reads events
 * (a polled page, an archive file) calls storeRejectedEvents inside the transaction that
 * stores the good events beside them, so the page commits whole: good rows stored, bad ones
 * rejected, exactly once per (source, event) — a re-read bumps seen_count. An event is its
 * id in its era: the same id of another year is another event. What is kept of an event
 * (raw, message) holds COMMIT_EMAILS like every stored push (src/store/commit-emails.ts):
 * an address in a rejected event is no more in clear than a stored one, and neither is the
 * log line that reports it.
 */

export interface RejectionRow {
  /** NULL when the event was not read by a source (e.g. an archive file). */
  sourceId: string | number | null;
  runId: string | number | null;
  /** The event's id as given (text), or null when it had none. */
  eventId: string | null;
  eventType: string | null;
  /** A stable code (src/store/rules.ts REJECTION_REASONS). */
  reason: string;
  message: string;
  /** The event as parsed, or TooDeepJson (its text) when it could not be parsed exactly. */
  raw: unknown;
}

export interface RejectionResult {
  /** Rows recorded for the first time: log these (event.rejected), once each. */
  firstSeen: RejectionRow[];
  /** Rows already recorded (seen again): their seen_count moved. */
  seenAgain: number;
}

/**
 * Rejected lines kept raw per archive file (src/backfill/import.ts): the rest are counted
 * on the file's checkpoint only, so a file of a million bad lines costs a count, not a
 * million rows. (A poll run reads at most a few hundred events; a webhook delivery is one.)
 */
export const REJECTED_SAMPLE = 1_000;

/** Text kept of an event too deep to parse: enough to find it, bounded. */
const MAX_RAW_TEXT = 64 * 1024;

/** raw as jsonb Postgres can hold: exact when it can be, else a sanitised copy. */
function storableRaw(raw: unknown): { json: string; exact: boolean; hashOf: string } {
  if (raw instanceof TooDeepJson) {
    const json = JSON.stringify(storableText(raw.text.slice(0, MAX_RAW_TEXT)));
    return { json, exact: false, hashOf: raw.text };
  }
  const found = inspectJson(raw, MAX_JSON_DEPTH);
  if (!found.tooDeep && !found.badText) {
    const json = JSON.stringify(raw) ?? 'null';
    return { json, exact: true, hashOf: json };
  }
  // The hash is of the input (JSON.stringify escapes what jsonb refuses; depth is bounded
  // by JSON.parse having read it), so the same rejected event maps to the same key every time.
  const json = JSON.stringify(storableCopy(raw, MAX_JSON_DEPTH)) ?? 'null';
  return { json, exact: false, hashOf: json };
}

/**
 * The era of the event (the UTC year of its created_at) when it has a valid one. GitHub
 * reuses event ids across eras, so an id alone does not name one event.
 */
function eraOf(raw: unknown): number | null {
  if (raw === null || typeof raw !== 'object' || raw instanceof TooDeepJson) return null;
  const at = (raw as Record<string, unknown>).created_at;
  const d = typeof at === 'string' ? parseTimestamp(at) : null;
  return d ? d.getUTCFullYear() : null;
}

/**
 * The dedupe key: the event's id and era (`<id>@<year>`) when both are valid, else a hash
 * of the event (the same rejected event read again maps to the same key either way).
 */
function eventKey(eventId: string | null, raw: unknown, hashOf: string): string {
  const id = eventId === null ? null : exactId(eventId);
  const era = id === null ? null : eraOf(raw);
  return era !== null
    ? `${id}@${era}`
    : `sha256:${createHash('sha256').update(hashOf).digest('hex')}`;
}

function clip(s: string | null, max: number): string | null {
  return s === null ? null : storableText(s.length > max ? `${s.slice(0, max)}…` : s);
}

/** A row as it may be kept and logged: its raw event and its message under `emails`. */
function underPolicy(row: RejectionRow, emails: CommitEmailMode): RejectionRow {
  if (emails === 'keep') return row;
  const raw =
    row.raw instanceof TooDeepJson
      ? new TooDeepJson(textUnderPolicy(row.raw.text, emails), row.raw.reason, row.raw.detail)
      : jsonUnderPolicy(row.raw, emails);
  return {
    ...row,
    raw,
    eventId: textUnderPolicy(row.eventId, emails),
    message: textUnderPolicy(row.message, emails),
  };
}

/**
 * Records rejected events once per (source, key). Idempotent: the same rejected event read again
 * (this run or a later one) moves last_seen_at, last_run_id and seen_count, nothing else
 * but the reason (the current rules' verdict). `emails` (COMMIT_EMAILS) shapes what is
 * kept; the key is of the event as read, so it does not depend on the setting. The rows
 * returned to log are the ones kept.
 */
export async function storeRejectedEvents(
  trx: Db,
  given: RejectionRow[],
  emails: CommitEmailMode = 'hash',
  now: Date = new Date(),
): Promise<RejectionResult> {
  if (given.length === 0) return { firstSeen: [], seenAgain: 0 };
  // One entry per key: a page listing the same poison twice must not update a row twice.
  const byKey = new Map<string, { row: RejectionRow; values: Record<string, unknown> }>();
  for (const original of given) {
    const asRead = storableRaw(original.raw);
    const key = eventKey(original.eventId, original.raw, asRead.hashOf);
    const row = underPolicy(original, emails);
    const raw = row.raw === original.raw ? asRead : storableRaw(row.raw);
    const sourceId = row.sourceId === null ? null : String(row.sourceId);
    const mapKey = `${sourceId ?? '0'}/${key}`;
    const seen = byKey.get(mapKey);
    if (seen) {
      (seen.values as { seen_count: number }).seen_count += 1;
      continue;
    }
    byKey.set(mapKey, {
      row,
      values: {
        source_id: sourceId,
        run_id: row.runId === null ? null : String(row.runId),
        last_run_id: row.runId === null ? null : String(row.runId),
        event_id: clip(row.eventId, 200),
        event_key: key,
        event_type: clip(row.eventType, 100),
        reason: row.reason,
        message: clip(row.message, 1000)!,
        raw: raw.json,
        // An address put under the policy is a change: no longer the event as read.
        raw_exact: raw.exact && row.raw === original.raw,
        first_seen_at: now,
        last_seen_at: now,
        seen_count: 1,
      },
    });
  }
  const entries = [...byKey.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const result = await trx
    .insertInto('rejected_events')
    .values(entries.map(([, e]) => e.values) as never)
    .onConflict((oc) =>
      oc.expression(sql`coalesce(source_id, 0), event_key`).doUpdateSet({
        last_seen_at: sql`excluded.last_seen_at`,
        last_run_id: sql`coalesce(excluded.last_run_id, rejected_events.last_run_id)`,
        seen_count: sql`rejected_events.seen_count + excluded.seen_count`,
        reason: sql`excluded.reason`,
        message: sql`excluded.message`,
      }),
    )
    .returning([
      sql<string>`coalesce(source_id, 0)::text`.as('source_key'),
      'event_key',
      sql<boolean>`xmax = 0`.as('inserted'),
    ])
    .execute();
  const firstSeen: RejectionRow[] = [];
  let seenAgain = 0;
  for (const r of result) {
    const entry = byKey.get(`${r.source_key}/${r.event_key}`);
    if (r.inserted && entry) firstSeen.push(entry.row);
    else seenAgain++;
  }
  return { firstSeen, seenAgain };
}

/** event.rejected, once per event rejected for the first time (call after COMMIT). */
export function logRejected(
  log: Logger,
  rows: RejectionRow[],
  context: Record<string, unknown> = {},
): void {
  for (const r of rows) {
    log.warn(
      {
        event: 'event.rejected',
        ...context,
        source_id: r.sourceId,
        run_id: r.runId,
        event_id: clip(r.eventId, 200),
        event_type: clip(r.eventType, 100),
        reason: r.reason,
        detail: r.message,
      },
      `event ${clip(r.eventId, 40) ?? '(no id)'} set aside: ${r.reason}: ${r.message}`,
    );
  }
}

export interface RejectedSummary {
  /** Events held in rejected_events. */
  total: number;
  /** Rejected for the first time in the last 24 hours. */
  last24h: number;
  byReason: Record<string, number>;
}

export async function rejectedSummary(db: Db, now: Date): Promise<RejectedSummary> {
  const since = new Date(now.getTime() - 86_400_000);
  const r = await sql<{ reason: string; n: string; recent: string }>`
    SELECT reason, count(*) AS n, count(*) FILTER (WHERE first_seen_at > ${since}) AS recent
    FROM rejected_events GROUP BY reason ORDER BY reason`.execute(db);
  const out: RejectedSummary = { total: 0, last24h: 0, byReason: {} };
  for (const row of r.rows) {
    out.total += Number(row.n);
    out.last24h += Number(row.recent);
    out.byReason[row.reason] = Number(row.n);
  }
  return out;
}
