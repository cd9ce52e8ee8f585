import { AppError } from '../platform/errors.ts';
import { exactId, isRawJson } from '../platform/json/exact.ts';
import { storableText, textFault } from '../platform/json/walk.ts';

/**
 * What a push must look like to be stored, shared by the poll path (src/store/mapping.ts)
 * and the webhook path (src/webhooks/push.ts). docs/reliability.md "Bad input" lists the
 * rules and the poison corpus that tests them. Two kinds of rule:
 *
 * - Key fields (ids, ref, head, before, login, repository name, created_at) identify the
 *   push or feed a btree index: a value that breaks a rule is REJECTED (the event is set
 *   aside in rejected_events, or the delivery recorded as `rejected:<reason>`), never
 *   altered — an altered key would be a different push.
 * - Free text (the rest of the payload, commit messages) is SANITISED: U+0000 and lone
 *   surrogates, which Postgres cannot hold, become U+FFFD; everything else is stored exactly.
 */

export const REJECTION_REASONS = [
  'not_an_object',
  'not_an_event',
  'malformed',
  'bad_id',
  'bad_timestamp',
  'invalid_text',
  'too_long',
  'too_deep',
  'too_wide',
  'store_failed',
] as const;
export type RejectionReason = (typeof REJECTION_REASONS)[number];

/** An event or delivery that cannot be stored; `reason` is a stable code, the message names the field. */
export class Rejection extends AppError {
  readonly reason: RejectionReason;
  constructor(reason: RejectionReason, message: string, context: Record<string, unknown> = {}) {
    // Messages quote input (paths, previews): keep them storable and short.
    super('EVENT_REJECTED', storableText(clip(message, 500)), { reason, ...context });
    this.reason = reason;
  }
}

/**
 * Byte caps (UTF-8) for key fields. push_events' primary key (repository_id, ref, before,
 * head) is a btree whose entries must stay under ~2,700 bytes: 8 + 1,024 + 2 × 128 plus
 * headers is under half of that, whatever the content (incompressible or not). GitHub
 * itself refuses branch names over ~250 bytes and logins over 39 characters; the caps are
 * generous above every legal value.
 */
export const KEY_CAPS = {
  ref: 1024,
  sha: 128,
  login: 255,
  repositoryName: 512,
  eventType: 100,
} as const;

function typeName(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? 'an object' : `a ${typeof v}`;
}

/** A JSON object (not an array, not null), or a Rejection naming `field`. */
export function objectField(value: unknown, field: string): Record<string, unknown> {
  if (value === undefined) throw new Rejection('malformed', `${field} is missing`);
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new Rejection('malformed', `${field} must be an object (got ${typeName(value)})`);
  }
  return value as Record<string, unknown>;
}

/** A GitHub id (see exactId) as a canonical decimal string. */
export function idField(value: unknown, field: string): string {
  if (value === undefined) throw new Rejection('malformed', `${field} is missing`);
  const id = exactId(value);
  if (id === null) {
    throw new Rejection(
      'bad_id',
      `${field} must be a numeric id from 0 to 2^63-1 (got ${preview(value)})`,
    );
  }
  return id;
}

/** A non-empty string that Postgres can store exactly and that fits its cap. */
export function keyText(value: unknown, field: string, maxBytes: number): string {
  if (value === undefined) throw new Rejection('malformed', `${field} is missing`);
  if (typeof value !== 'string') {
    throw new Rejection('malformed', `${field} must be a string (got ${typeName(value)})`);
  }
  if (value === '') throw new Rejection('malformed', `${field} must not be empty`);
  const fault = textFault(value);
  if (fault) {
    throw new Rejection(
      'invalid_text',
      `${field} contains ${fault === 'nul' ? 'a NUL character (U+0000)' : 'a lone UTF-16 surrogate (or bytes that are not UTF-8)'}, which cannot be stored exactly`,
    );
  }
  const bytes = Buffer.byteLength(value, 'utf8');
  if (bytes > maxBytes) {
    throw new Rejection('too_long', `${field} is ${bytes} bytes long (at most ${maxBytes})`);
  }
  return value;
}

/** A count stored in an integer column (size, distinct_size). */
export function countField(value: unknown, field: string): number {
  if (
    typeof value !== 'number' ||
    !Number.isSafeInteger(value) ||
    value < 0 ||
    value > 2 ** 31 - 1
  ) {
    throw new Rejection('malformed', `${field} must be a count (got ${preview(value)})`);
  }
  return value;
}

// 2026-11-29T08:00:00Z, with optional fraction and a Z or ±hh:mm offset.
const ISO_TIMESTAMP =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-](\d{2}):(\d{2}))$/;

/** Earliest and latest instants we store: what both JavaScript and Postgres hold, in 4-digit years. */
export const TIMESTAMP_RANGE = {
  min: Date.UTC(1970, 0, 1),
  max: Date.UTC(9999, 11, 31, 23, 59, 59, 999),
};

/**
 * The last text parsed and its instant: a poll page parses each event's created_at twice
 * in a row (its era for the horizon, then the push's row), and this is a pure function.
 */
let lastParsed: { value: string; ms: number | null } = { value: '', ms: null };

/** A real calendar instant (no Feb 30, no hour 24) in TIMESTAMP_RANGE, or null. */
export function parseTimestamp(value: string): Date | null {
  if (value !== lastParsed.value) lastParsed = { value, ms: parsedMs(value) };
  return lastParsed.ms === null ? null : new Date(lastParsed.ms);
}

function parsedMs(value: string): number | null {
  const m = ISO_TIMESTAMP.exec(value);
  if (!m) return null;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as number[];
  const local = new Date(Date.UTC(year!, month! - 1, day!, hour!, minute!, second!));
  if (
    local.getUTCFullYear() !== year ||
    local.getUTCMonth() !== month! - 1 ||
    local.getUTCDate() !== day ||
    hour! > 23 ||
    minute! > 59 ||
    second! > 59
  ) {
    return null;
  }
  const offsetMinutes =
    m[8] === 'Z' ? 0 : (m[8]!.startsWith('-') ? -1 : 1) * (Number(m[9]) * 60 + Number(m[10]));
  if (Number(m[9] ?? 0) > 23 || Number(m[10] ?? 0) > 59) return null;
  const ms = local.getTime() - offsetMinutes * 60_000 + Math.floor(Number(`0${m[7] ?? ''}`) * 1000);
  if (ms < TIMESTAMP_RANGE.min || ms > TIMESTAMP_RANGE.max) return null;
  return ms;
}

export function timestampField(value: unknown, field: string): Date {
  if (value === undefined) throw new Rejection('malformed', `${field} is missing`);
  const d = typeof value === 'string' ? parseTimestamp(value) : null;
  if (!d) {
    throw new Rejection(
      'bad_timestamp',
      `${field} must be an ISO 8601 timestamp between 1970 and 9999 (got ${preview(value)})`,
    );
  }
  return d;
}

function clip(s: string, max: number): string {
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

/** A short, safe rendering of a bad value for a message (never the whole of a 5 MB string). */
function preview(value: unknown): string {
  let s: string;
  if (typeof value === 'string')
    s = JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
  else if (value === undefined) s = 'undefined';
  else if (isRawJson(value)) s = value.rawJSON;
  else if (value !== null && typeof value === 'object') s = typeName(value);
  else s = String(value);
  return s.length > 80 ? `${s.slice(0, 80)}…` : s;
}
