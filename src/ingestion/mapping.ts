import { z } from 'zod';
import { AppError } from '../errors.ts';

/**
 * GitHub events → what we store. A page is validated as a whole before anything is
 * written: one event that is not what GitHub documents fails the run (MalformedEvent),
 * because storing the rest would hide a broken feed or a broken client behind
 * plausible-looking numbers.
 */

/** An event (or page) that is not shaped the way GitHub documents it. */
export class MalformedEvent extends AppError {
  constructor(path: string, detail: string, context: Record<string, unknown> = {}) {
    super('MALFORMED_EVENT', `malformed event feed ${path}: ${detail}`, { path, ...context });
  }
}

/** A push, however it arrived (poll: with the event id; webhook: id null). */
export interface PushRow {
  /** GitHub event id as a decimal string (bigint); null for webhook deliveries. */
  id: string | null;
  actor: { id: number; login: string };
  repository: { id: number; fullName: string };
  pushId: number | null;
  ref: string;
  head: string;
  before: string;
  createdAt: Date;
  /** The event's payload as GitHub sent it (size/commits kept when present). */
  payload: Record<string, unknown>;
  size: number | null;
  distinctSize: number | null;
}

export interface MappedPage {
  /** Every event id on the page, in feed order (newest first), push or not. */
  eventIds: string[];
  pushes: PushRow[];
  /** Non-push events by type: counted, never stored. */
  otherTypes: Record<string, number>;
}

// Ids arrive as JSON numbers (actor, repo) or decimal strings (event ids). Either form
// is accepted; anything else ("abc", 1.5, -3, beyond 2^53) is not a GitHub id.
const numericId = z.unknown().transform((v, ctx): number | string => {
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return v;
  if (typeof v === 'string' && /^\d{1,16}$/.test(v)) return v;
  ctx.addIssue({
    code: 'custom',
    message: v === undefined ? 'is missing' : `must be a numeric id (got ${JSON.stringify(v)})`,
  });
  return z.NEVER;
});

const nonEmpty = z.string().min(1, 'must not be empty');

const anyEvent = z.object({
  id: numericId,
  type: nonEmpty,
});

const pushEvent = z.object({
  id: numericId,
  type: z.literal('PushEvent'),
  actor: z.object({ id: numericId, login: nonEmpty }),
  repo: z.object({
    id: numericId,
    name: z.string().regex(/^[^/\s]+\/[^/\s]+$/, 'must be OWNER/NAME'),
  }),
  created_at: z.iso.datetime({ offset: true, message: 'must be an ISO 8601 timestamp' }),
  payload: z.looseObject({
    push_id: numericId.optional(),
    ref: nonEmpty,
    head: nonEmpty,
    before: nonEmpty,
    size: z.number().int().nonnegative('must be a count').optional(),
    distinct_size: z.number().int().nonnegative('must be a count').optional(),
  }),
});

function describeIssue(err: z.ZodError): string {
  const issue = err.issues[0]!;
  const where = issue.path.length ? issue.path.join('.') : 'event';
  if (issue.code === 'invalid_type') {
    return /received undefined/.test(issue.message)
      ? `${where} is missing`
      : `${where} must be ${issue.expected}`;
  }
  return `${where} ${issue.message}`;
}

function eventIdOf(v: number | string): string {
  return BigInt(v).toString();
}

/**
 * Postgres text and jsonb cannot hold U+0000 (the insert fails with an encoding error), so
 * a value carrying one can be rejected as malformed but never stored exactly. Returns the
 * path of the first string (or key) that holds one, or null.
 */
export function findNul(value: unknown, path = ''): string | null {
  if (typeof value === 'string') return value.includes('\u0000') ? path || 'value' : null;
  if (Array.isArray(value)) {
    for (const [i, v] of value.entries()) {
      const found = findNul(v, `${path}[${i}]`);
      if (found) return found;
    }
    return null;
  }
  if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      const at = path ? `${path}.${k}` : k;
      if (k.includes('\u0000')) return at;
      const found = findNul(v, at);
      if (found) return found;
    }
  }
  return null;
}

/** Maps one PushEvent (already known to be one) to a PushRow, or throws MalformedEvent. */
export function mapPushEvent(raw: unknown, path: string, index: number): PushRow {
  const parsed = pushEvent.safeParse(raw);
  if (!parsed.success) {
    const id = (raw as { id?: unknown })?.id;
    throw new MalformedEvent(
      path,
      `event #${index} (id ${String(id)}): ${describeIssue(parsed.error)}`,
      {
        index,
        eventId: id,
      },
    );
  }
  const e = parsed.data;
  const p = e.payload;
  const nul = findNul({ actor: e.actor, repo: e.repo, payload: p });
  if (nul) {
    throw new MalformedEvent(
      path,
      `event #${index} (id ${String(e.id)}): ${nul} contains a NUL character (U+0000), which cannot be stored`,
      { index, eventId: e.id },
    );
  }
  return {
    id: eventIdOf(e.id),
    actor: { id: Number(e.actor.id), login: e.actor.login },
    repository: { id: Number(e.repo.id), fullName: e.repo.name },
    pushId: p.push_id === undefined ? null : Number(p.push_id),
    ref: p.ref,
    head: p.head,
    before: p.before,
    createdAt: new Date(e.created_at),
    payload: p,
    size: p.size ?? null,
    distinctSize: p.distinct_size ?? null,
  };
}

/** Validates and maps one page of an events feed. Throws MalformedEvent on the first bad event. */
export function mapEventsPage(data: unknown, path: string): MappedPage {
  if (!Array.isArray(data)) {
    throw new MalformedEvent(
      path,
      `expected a JSON array of events, got ${data === null ? 'null' : typeof data}`,
    );
  }
  const page: MappedPage = { eventIds: [], pushes: [], otherTypes: {} };
  data.forEach((raw, index) => {
    const parsed = anyEvent.safeParse(raw);
    if (!parsed.success) {
      throw new MalformedEvent(path, `event #${index}: ${describeIssue(parsed.error)}`, { index });
    }
    page.eventIds.push(eventIdOf(parsed.data.id));
    if (parsed.data.type === 'PushEvent') {
      page.pushes.push(mapPushEvent(raw, path, index));
    } else {
      page.otherTypes[parsed.data.type] = (page.otherTypes[parsed.data.type] ?? 0) + 1;
    }
  });
  return page;
}
