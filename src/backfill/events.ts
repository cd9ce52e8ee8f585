import type { EventSource } from '../platform/db/schema.ts';
import { jsonBytesExcess, MAX_JSON_DEPTH } from '../platform/json/bounded.ts';
import { JsonTooDeep, JsonTooWide, parseJson } from '../platform/json/exact.ts';
import { decodeUtf8KeepingInvalid } from '../platform/json/utf8.ts';
import { mapPushEvent, orgOf, type PushRow } from '../store/mapping.ts';
import { idField, KEY_CAPS, Rejection, type RejectionReason } from '../store/rules.ts';
import { type Line, OVERSIZE } from './lines.ts';
import { isTimelineLine, timelineNames, timelinePush } from './timeline.ts';

/**
 * One archive line → what it is. Only lines that may hold a PushEvent are parsed: an hour
 * is ~half other event types, often large, and the bulk path's budget is a fraction of a
 * COPY (ADR 0040). A line that does not contain `"PushEvent"` at all cannot be one — JSON
 * escapes the quotes of any string value — so it is counted as another event after a
 * shape check (`{` … `}`, and a `"type"` and an `"id"` — or, in a timeline-format line of
 * 2011–2014, an `"actor"` — somewhere: `{}` is not an event)
 * that catches garbage and truncated lines. Its inside is not validated: we do not store
 * other event types, so a broken one costs nothing. A push line is measured against the
 * JSON limits (src/platform/json/bounded.ts) before it is parsed, and decoded keeping its invalid
 * UTF-8 bytes distinguishable (src/platform/json/utf8.ts).
 */

export type LineVerdict =
  | { kind: 'blank' }
  | { kind: 'other' }
  | { kind: 'push'; event: Record<string, unknown>; text: string }
  | {
      kind: 'malformed';
      reason: RejectionReason;
      detail: string;
      eventId: string | null;
      /** What to keep of the line in rejected_events (bounded). */
      raw: unknown;
    };

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
function excerpt(line: Buffer | string, max = 120): string {
  const s = typeof line === 'string' ? line : line.subarray(0, max * 4).toString('utf8');
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it removes
  const flat = s.replace(/[\u0000-\u001f]/g, ' ');
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** Text of a line kept for the record: enough to find it, bounded. */
const MAX_KEPT_TEXT = 64 * 1024;
const TYPE_MARK = Buffer.from('"type"');
const ID_MARK = Buffer.from('"id"');
const ACTOR_MARK = Buffer.from('"actor"');

function keptText(line: Buffer): string {
  return line.subarray(0, MAX_KEPT_TEXT).toString('utf8');
}

/** A JSON object that is not an event (no type, or no id nor actor): rejected, not an event. */
function notAnEvent(line: Buffer): LineVerdict {
  return {
    kind: 'malformed',
    reason: 'not_an_event',
    detail: `not an event (no "type", or neither "id" nor "actor"): ${excerpt(line)}`,
    eventId: null,
    raw: keptText(line),
  };
}

export function classifyLine(raw: Line): LineVerdict {
  if (raw === OVERSIZE) {
    return {
      kind: 'malformed',
      reason: 'too_long',
      detail: 'line too long',
      eventId: null,
      raw: null,
    };
  }
  const line = trimmed(raw);
  if (line.length === 0) return { kind: 'blank' };
  if (line[0] !== 0x7b || line[line.length - 1] !== 0x7d) {
    return {
      kind: 'malformed',
      reason: 'malformed',
      detail: `not a JSON object: ${excerpt(line)}`,
      eventId: null,
      raw: keptText(line),
    };
  }
  if (line.indexOf(PUSH_MARK) === -1) {
    // Not parsed (see above), but an event has a type and an id (a timeline-format one, of
    // 2011–2014, an actor instead): `{}` is not one.
    if (
      line.indexOf(TYPE_MARK) === -1 ||
      (line.indexOf(ID_MARK) === -1 && line.indexOf(ACTOR_MARK) === -1)
    ) {
      return notAnEvent(line);
    }
    return { kind: 'other' };
  }
  // Measured before it is parsed: a line over the limits is never built.
  const over = jsonBytesExcess(line);
  if (over) {
    return {
      kind: 'malformed',
      reason: over.reason,
      detail: `${over.message}: ${excerpt(line)}`,
      eventId: null,
      raw: keptText(line),
    };
  }
  // Invalid UTF-8 is kept distinguishable (src/platform/json/utf8.ts): a key field holding it is
  // rejected by the rules, never stored as U+FFFD.
  const text = decodeUtf8KeepingInvalid(line);
  let event: unknown;
  try {
    // Plain JSON.parse: the fast path checks that no integer lost digits, and whatever it
    // does not take is parsed again exactly (mapArchivePush).
    event = JSON.parse(text);
  } catch (err) {
    return {
      kind: 'malformed',
      reason: 'malformed',
      detail: `invalid JSON (${(err as Error).message}): ${excerpt(text)}`,
      eventId: null,
      raw: text.slice(0, MAX_KEPT_TEXT),
    };
  }
  if (event === null || typeof event !== 'object' || Array.isArray(event)) {
    return {
      kind: 'malformed',
      reason: 'not_an_object',
      detail: 'not a JSON object',
      eventId: null,
      raw: event,
    };
  }
  const e = event as Record<string, unknown>;
  if (e.type === 'PushEvent') return { kind: 'push', event: e, text };
  // A timeline-format line (2011–2014) has no id: it is an event all the same.
  if (typeof e.type !== 'string' || (e.id === undefined && !isTimelineLine(e))) {
    return notAnEvent(line);
  }
  return { kind: 'other' };
}

const DECIMAL_ID = /^\d{1,18}$/;
const REPO_NAME = /^[^/\s]+\/[^/\s]+$/;
const CANONICAL_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/;
/** JSON escapes of what Postgres cannot hold (U+0000, UTF-16 surrogates): the rules decide. */
const UNSTORABLE_ESCAPE = /\\u(0000|[dD][89a-fA-F])/;

const isId = (v: unknown): v is number =>
  typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isCount = (v: unknown) => v === undefined || (isId(v) && v <= 2 ** 31 - 1);
const asObject = (v: unknown): Record<string, unknown> | null =>
  v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;

/** A non-empty string within its byte cap (UTF-8 is at most 3 bytes per UTF-16 unit). */
function fits(v: unknown, maxBytes: number): v is string {
  if (typeof v !== 'string' || v.length === 0) return false;
  return v.length * 3 <= maxBytes || Buffer.byteLength(v) <= maxBytes;
}

/**
 * The payload is stored whole: nothing in it nested near the cap, and no integer JSON.parse
 * could not hold exactly (it would be stored rounded). A push's payload is a handful of
 * values, so this walk costs next to nothing.
 */
function plainPayload(payload: Record<string, unknown>): boolean {
  const stack: [unknown, number][] = [[payload, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (typeof v === 'number') {
      if (Number.isInteger(v) && !Number.isSafeInteger(v)) return false;
      continue;
    }
    if (v === null || typeof v !== 'object') continue;
    if (depth >= MAX_JSON_DEPTH - 2) return false;
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, depth + 1]);
  }
  return true;
}

/**
 * The fast path of mapPushEvent (src/store/rules.ts) for the shape GH Archive writes
 * (a string event id, numeric actor and repository ids, `YYYY-MM-DDTHH:MM:SSZ`, text with
 * nothing Postgres refuses). It returns a row only when mapPushEvent would return the same
 * row (test/unit/backfill-events.test.ts holds the two side by side); anything else — an
 * unusual but valid shape as much as a broken one — returns null and goes through
 * mapPushEvent, which decides — on the line parsed again exactly (JSON.parse rounds an
 * integer beyond 2^53, which the fast path refuses to take). The rules walk every value of
 * the event (~15 µs); this checks what it must in a fraction of that.
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
  if (!isId(actor.id) || !fits(actor.login, KEY_CAPS.login)) return null;
  if (!isId(repo.id) || !fits(repo.name, KEY_CAPS.repositoryName) || !REPO_NAME.test(repo.name)) {
    return null;
  }
  const createdAt = e.created_at;
  if (typeof createdAt !== 'string' || !CANONICAL_TIME.test(createdAt)) return null;
  const at = new Date(createdAt);
  // A real instant written canonically (no 24:00, no February 30th), in the range we store.
  if (Number.isNaN(at.getTime()) || at.toISOString() !== `${createdAt.slice(0, -1)}.000Z`) {
    return null;
  }
  if (at.getUTCFullYear() < 1970) return null;
  const { ref, head, before, push_id: pushId, size, distinct_size: distinctSize } = payload;
  if (!fits(ref, KEY_CAPS.ref) || !fits(head, KEY_CAPS.sha) || !fits(before, KEY_CAPS.sha)) {
    return null;
  }
  if (pushId !== undefined && !isId(pushId)) return null;
  if (!isCount(size) || !isCount(distinctSize)) return null;
  // An org id JSON.parse may have rounded: the exact parse decides.
  const orgId = asObject(e.org)?.id;
  if (typeof orgId === 'number' && !Number.isSafeInteger(orgId)) return null;
  if ((text.includes('\\u') && UNSTORABLE_ESCAPE.test(text)) || !plainPayload(payload)) return null;
  // Bytes that were not UTF-8 (lone surrogates, src/platform/json/utf8.ts): the rules decide.
  if (!text.isWellFormed()) return null;
  return {
    id,
    actor: { id: String(actor.id), login: actor.login },
    repository: { id: String(repo.id), fullName: repo.name },
    org: orgOf(e.org),
    pushId: pushId === undefined ? null : String(pushId),
    ref,
    head,
    before,
    createdAt: at,
    payload,
    size: (size as number | undefined) ?? null,
    distinctSize: (distinctSize as number | undefined) ?? null,
  };
}

export interface ArchiveRejection {
  rejected: RejectionReason;
  message: string;
  eventId: string | null;
}

/** Digits enough that JSON.parse may have rounded a number: such a line is parsed again exactly. */
const LONG_NUMBER = /\d{16}/;

/** A push line → its row (free text made storable, as the poll path does), or why it is rejected. */
export function mapArchivePush(
  e: Record<string, unknown>,
  text: string,
  lineNo: number,
): PushRow | ArchiveRejection {
  const fast = fastMapPush(e, text);
  if (fast) return fast;
  try {
    if (isTimelineLine(e)) {
      return timelinePush(
        LONG_NUMBER.test(text) ? (parseJson(text) as Record<string, unknown>) : e,
      );
    }
    // The rules judge the event as parsed exactly: no id or payload number rounded.
    const exact = parseJson(text) as Record<string, unknown>;
    // `"id": null`: another instance's line of a push it knows only by webhook, stored as a
    // webhook copy is, without an event id. A missing or bad id is still refused.
    return mapPushEvent(exact, exact.id === null ? null : idField(exact.id, 'id')).push;
  } catch (caught) {
    // classifyLine measured the line already; the parser's own verdicts are rejections too.
    const err =
      caught instanceof JsonTooDeep || caught instanceof JsonTooWide
        ? new Rejection(caught.reason, caught.message)
        : caught;
    if (!(err instanceof Rejection)) throw err;
    const id = e.id;
    return {
      rejected: err.reason,
      message: `line ${lineNo}: ${err.message}`,
      eventId: typeof id === 'string' || typeof id === 'number' ? String(id) : null,
    };
  }
}

/** Which archive events belong to a source: what its feed would have listed. */
export type ScopeTest = (e: Record<string, unknown>) => boolean;

function lower(v: unknown): string | null {
  return typeof v === 'string' ? v.toLowerCase() : null;
}

/** The names a scope tests, from a modern line or a timeline-format one. */
function namesOf(e: Record<string, unknown>) {
  if (isTimelineLine(e)) return timelineNames(e);
  const repo = asObject(e.repo);
  return {
    actorLogin: asObject(e.actor)?.login,
    repoName: repo?.name,
    repoId: repo?.id,
    orgLogin: asObject(e.org)?.login,
  };
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
        const { repoName, repoId } = namesOf(e);
        return lower(repoName) === target || (knownRepoId !== null && repoId === knownRepoId);
      };
    case 'org':
      return (e) => {
        const { orgLogin, repoName } = namesOf(e);
        return lower(orgLogin) === target || (lower(repoName)?.split('/')[0] ?? null) === target;
      };
    case 'user':
      return (e) => lower(namesOf(e).actorLogin) === target;
  }
}
