import { jsonInteger } from '../platform/json/exact.ts';
import { storableText } from '../platform/json/walk.ts';
import { orgOf, type PushRow } from '../store/mapping.ts';
import {
  idField,
  KEY_CAPS,
  keyText,
  objectField,
  parseTimestamp,
  Rejection,
  TIMESTAMP_RANGE,
} from '../store/rules.ts';

/**
 * A `push` webhook payload → the PushRow polling would have produced for the same push.
 * The webhook knows no event id (that is the Events API's), so `id` is null until a polled
 * copy fills it in; the natural key (repository id, ref, before, head = after) is what
 * makes the two one row (ADR 0008). The same rules as polling (src/store/rules.ts):
 * key fields are checked and a bad one rejects the push (Rejection); free text (commit
 * messages, authors) is made storable.
 */

const OWNER_NAME = /^[^/\s]+\/[^/\s]+$/;

/** Push deliveries carry the repository's pushed_at as epoch seconds (or ISO text). */
function pushedAt(raw: unknown, receivedAt: Date): Date {
  if (typeof raw === 'number' && Number.isFinite(raw)) {
    const ms = raw * 1000;
    if (ms >= TIMESTAMP_RANGE.min && ms <= TIMESTAMP_RANGE.max) return new Date(ms);
  }
  if (typeof raw === 'string') return parseTimestamp(raw) ?? receivedAt;
  // Absent, or a time nothing can hold (1e13 s): it only dates the push; the arrival does too.
  return receivedAt;
}

function optionalText(value: unknown, field: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') throw new Rejection('malformed', `${field} must be a string`);
  return storableText(value);
}

function mapCommit(raw: unknown, i: number) {
  const c = objectField(raw, `commits[${i}]`);
  const id = optionalText(c.id, `commits[${i}].id`);
  if (!id) throw new Rejection('malformed', `commits[${i}].id is missing`);
  const author =
    c.author === undefined || c.author === null
      ? {}
      : objectField(c.author, `commits[${i}].author`);
  if (c.distinct !== undefined && typeof c.distinct !== 'boolean') {
    throw new Rejection('malformed', `commits[${i}].distinct must be a boolean`);
  }
  return {
    sha: id,
    author: {
      name: optionalText(author.name, `commits[${i}].author.name`),
      email: optionalText(author.email, `commits[${i}].author.email`),
    },
    message: optionalText(c.message, `commits[${i}].message`),
    distinct: c.distinct ?? true,
    url: optionalText(c.url, `commits[${i}].url`),
  };
}

/**
 * Maps a push delivery (a JSON object). The stored payload has the Events API's shape
 * (`head`, `before`, `ref`, `size`, `distinct_size`, `commits` with `sha`), so a consumer
 * reading push_events.payload need not care how the push arrived. Throws Rejection.
 */
export function mapPushDelivery(body: Record<string, unknown>, receivedAt: Date): PushRow {
  const ref = keyText(body.ref, 'ref', KEY_CAPS.ref);
  const before = keyText(body.before, 'before', KEY_CAPS.sha);
  const after = keyText(body.after, 'after', KEY_CAPS.sha);
  const repository = objectField(body.repository, 'repository');
  const repositoryId = idField(repository.id, 'repository.id');
  const fullName = keyText(repository.full_name, 'repository.full_name', KEY_CAPS.repositoryName);
  if (!OWNER_NAME.test(fullName)) {
    throw new Rejection('malformed', 'repository.full_name must be OWNER/NAME');
  }
  const sender = objectField(body.sender, 'sender');
  const senderId = idField(sender.id, 'sender.id');
  const login = keyText(sender.login, 'sender.login', KEY_CAPS.login);
  if (body.commits !== undefined && body.commits !== null && !Array.isArray(body.commits)) {
    throw new Rejection('malformed', 'commits must be an array');
  }
  const commits = ((body.commits as unknown[] | null | undefined) ?? []).map(mapCommit);
  const distinct = commits.filter((c) => c.distinct).length;
  return {
    id: null,
    actor: { id: senderId, login },
    repository: { id: repositoryId, fullName },
    // The Events API's `org` of the same push: the organisation that owns the repository.
    org: orgOf(body.organization),
    pushId: null,
    ref,
    head: after,
    before,
    createdAt: pushedAt(repository.pushed_at, receivedAt),
    payload: {
      // The id as a JSON number with every digit (JSON.stringify writes rawJSON verbatim).
      repository_id: exactNumber(repositoryId),
      ref,
      head: after,
      before,
      size: commits.length,
      distinct_size: distinct,
      commits,
    },
    size: commits.length,
    distinctSize: distinct,
    ...(repository.private === true ? { private: true as const } : {}),
  };
}

function exactNumber(id: string): unknown {
  const n = Number(id);
  return Number.isSafeInteger(n) ? n : jsonInteger(id);
}
