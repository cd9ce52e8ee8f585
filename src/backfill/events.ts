import type { EventSource } from '../db/schema.ts';
import { MalformedEvent, mapPushEvent, type PushRow } from '../ingestion/mapping.ts';
import { type Line, OVERSIZE } from './lines.ts';

/**
 * One archive line → what it is. Only lines that may hold a PushEvent are parsed: an hour
 * is ~half other event types, often large, and the bulk path's budget is a fraction of a
 * COPY (ADR 0040). A line that does not contain `"PushEvent"` at all cannot be one — JSON
 * escapes the quotes of any string value — so it is counted as another event after a
 * shape check (`{` … `}`) that catches garbage and truncated lines. Its inside is not
 * validated: we do not store other event types, so a broken one costs nothing.
 */

export type LineVerdict =
  | { kind: 'blank' }
  | { kind: 'other' }
  | { kind: 'push'; event: Record<string, unknown>; text: string }
  | { kind: 'malformed'; reason: MalformedReason; detail: string; eventId: string | null };

export type MalformedReason = 'not_json' | 'too_long' | 'bad_push' | 'refused_by_database';

const PUSH_MARK = Buffer.from('"PushEvent"');
const SPACE = new Set([0x20, 0x09, 0x0d, 0x0a]);

function trimmed(line: Buffer): Buffer {
  let a = 0;
  let b = line.length;
  while (a < b && SPACE.has(line[a]!)) a++;
  while (b > a && SPACE.has(line[b - 1]!)) b--;
  return a === 0 && b === line.length ? line : line.subarray(a, b);
}

/** A short, printable excerpt of a bad line for logs and errors (never the whole line). */
export function excerpt(line: Buffer | string, max = 120): string {
  const s = typeof line === 'string' ? line : line.subarray(0, max * 4).toString('utf8');
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it removes
  const flat = s.replace(/[\u0000-\u001f]/g, ' ');
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

export function classifyLine(raw: Line): LineVerdict {
  if (raw === OVERSIZE) {
    return { kind: 'malformed', reason: 'too_long', detail: 'line too long', eventId: null };
  }
  const line = trimmed(raw);
  if (line.length === 0) return { kind: 'blank' };
  if (line[0] !== 0x7b || line[line.length - 1] !== 0x7d) {
    return {
      kind: 'malformed',
      reason: 'not_json',
      detail: `not a JSON object: ${excerpt(line)}`,
      eventId: null,
    };
  }
  if (line.indexOf(PUSH_MARK) === -1) return { kind: 'other' };
  const text = line.toString('utf8');
  let event: unknown;
  try {
    event = JSON.parse(text);
  } catch (err) {
    return {
      kind: 'malformed',
      reason: 'not_json',
      detail: `invalid JSON (${(err as Error).message}): ${excerpt(text)}`,
      eventId: null,
    };
  }
  if (event === null || typeof event !== 'object' || Array.isArray(event)) {
    return {
      kind: 'malformed',
      reason: 'not_json',
      detail: 'not a JSON object',
      eventId: null,
    };
  }
  const e = event as Record<string, unknown>;
  return e.type === 'PushEvent' ? { kind: 'push', event: e, text } : { kind: 'other' };
}

const DECIMAL_ID = /^\d{1,16}$/;
const REPO_NAME = /^[^/\s]+\/[^/\s]+$/;
const CANONICAL_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/;

const isId = (v: unknown): v is number =>
  typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isText = (v: unknown): v is string => typeof v === 'string' && v.length > 0;
const isCount = (v: unknown) => v === undefined || isId(v);
const asObject = (v: unknown): Record<string, unknown> | null =>
  v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;

/**
 * The fast path of mapPushEvent for the shape GH Archive writes (string event id, numeric
 * actor/repo ids, `YYYY-MM-DDTHH:MM:SSZ`). It returns a row only when mapPushEvent would
 * return the same row (test/unit/backfill-events.test.ts holds the two side by side);
 * anything else — an unusual but valid shape as much as a broken one — returns null and
 * goes through mapPushEvent, which decides (and names what is wrong). The schema-driven
 * path costs ~15 µs an event; this one about a tenth of it.
 */
export function fastMapPush(e: Record<string, unknown>, text: string): PushRow | null {
  const id = e.id;
  if (typeof id !== 'string' || !DECIMAL_ID.test(id) || (id.length > 1 && id[0] === '0')) {
    return null;
  }
  const actor = asObject(e.actor);
  const repo = asObject(e.repo);
  const payload = asObject(e.payload);
  if (!actor || !repo || !payload) return null;
  if (!isId(actor.id) || !isText(actor.login)) return null;
  if (!isId(repo.id) || typeof repo.name !== 'string' || !REPO_NAME.test(repo.name)) return null;
  const createdAt = e.created_at;
  if (typeof createdAt !== 'string' || !CANONICAL_TIME.test(createdAt)) return null;
  const at = new Date(createdAt);
  // A real instant written canonically (no 24:00, no February 30th).
  if (Number.isNaN(at.getTime()) || at.toISOString() !== `${createdAt.slice(0, -1)}.000Z`) {
    return null;
  }
  const { ref, head, before, push_id: pushId, size, distinct_size: distinctSize } = payload;
  if (!isText(ref) || !isText(head) || !isText(before)) return null;
  if (pushId !== undefined && !isId(pushId)) return null;
  if (!isCount(size) || !isCount(distinctSize)) return null;
  // NUL cannot be stored in text or jsonb; JSON can only carry it escaped.
  if (text.includes('\\u0000')) return null;
  return {
    id,
    actor: { id: actor.id, login: actor.login },
    repository: { id: repo.id, fullName: repo.name },
    pushId: pushId === undefined ? null : pushId,
    ref,
    head,
    before,
    createdAt: at,
    payload,
    size: (size as number | undefined) ?? null,
    distinctSize: (distinctSize as number | undefined) ?? null,
  };
}

/** A push line → its row, or the reason it cannot be stored. */
export function mapArchivePush(
  e: Record<string, unknown>,
  text: string,
  lineNo: number,
): PushRow | { malformed: string; eventId: string | null } {
  const fast = fastMapPush(e, text);
  if (fast) return fast;
  try {
    return mapPushEvent(e, `line ${lineNo}`, lineNo);
  } catch (err) {
    if (!(err instanceof MalformedEvent)) throw err;
    const id = e.id;
    return {
      malformed: err.message.replace(/^malformed event feed /, ''),
      eventId: typeof id === 'string' || typeof id === 'number' ? String(id) : null,
    };
  }
}

/** Which archive events belong to a source: what its feed would have listed. */
export type ScopeTest = (e: Record<string, unknown>) => boolean;

function lower(v: unknown): string | null {
  return typeof v === 'string' ? v.toLowerCase() : null;
}

/**
 * `public`: every event. `repo O/N`: that repository (by name as the event recorded it, or
 * by the id we hold for that name). `org O`: events whose `org` is O or whose repository
 * O owns. `user L`: events L performed (the actor), as GitHub's user feed lists them.
 */
export function scopeOf(
  source: Pick<EventSource, 'kind' | 'target'>,
  knownRepoId: number | null = null,
): ScopeTest {
  const target = source.target?.toLowerCase() ?? '';
  switch (source.kind) {
    case 'public':
      return () => true;
    case 'repo':
      return (e) => {
        const repo = asObject(e.repo);
        return lower(repo?.name) === target || (knownRepoId !== null && repo?.id === knownRepoId);
      };
    case 'org':
      return (e) =>
        lower(asObject(e.org)?.login) === target ||
        (lower(asObject(e.repo)?.name)?.split('/')[0] ?? null) === target;
    case 'user':
      return (e) => lower(asObject(e.actor)?.login) === target;
  }
}
