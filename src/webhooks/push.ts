import { z } from 'zod';
import { AppError } from '../errors.ts';
import { findNul, type PushRow } from '../ingestion/mapping.ts';

/**
 * A `push` webhook payload → the PushRow polling would have produced for the same push.
 * The webhook knows no event id (that is the Events API's), so `id` is null until a polled
 * copy fills it in; the natural key (repository id, ref, before, head = after) is what
 * makes the two one row (ADR 0008).
 */

/** A push delivery that is not shaped the way GitHub documents it. */
export class MalformedDelivery extends AppError {
  constructor(detail: string) {
    super('MALFORMED_DELIVERY', `malformed push delivery: ${detail}`, { detail });
  }
}

const numericId = z.union([z.number().int().nonnegative(), z.string().regex(/^\d{1,16}$/)]);
const nonEmpty = z.string().min(1, 'must not be empty');

const commit = z.looseObject({
  id: nonEmpty,
  message: z.string().optional(),
  distinct: z.boolean().optional(),
  url: z.string().optional(),
  author: z.looseObject({ name: z.string().optional(), email: z.string().optional() }).optional(),
});

const pushPayload = z.looseObject({
  ref: nonEmpty,
  before: nonEmpty,
  after: nonEmpty,
  repository: z.looseObject({
    id: numericId,
    full_name: z.string().regex(/^[^/\s]+\/[^/\s]+$/, 'must be OWNER/NAME'),
    // Push deliveries carry the repository's pushed_at as epoch seconds.
    pushed_at: z.union([z.number(), z.string(), z.null()]).optional(),
  }),
  sender: z.looseObject({ id: numericId, login: nonEmpty }),
  commits: z.array(commit).optional(),
});

function describe(err: z.ZodError): string {
  const issue = err.issues[0]!;
  return `${issue.path.join('.') || 'payload'}: ${issue.message}`;
}

function pushedAt(raw: number | string | null | undefined, receivedAt: Date): Date {
  if (typeof raw === 'number' && Number.isFinite(raw) && raw > 0) return new Date(raw * 1000);
  if (typeof raw === 'string') {
    const d = new Date(raw);
    if (!Number.isNaN(d.getTime())) return d;
  }
  return receivedAt;
}

/**
 * Maps a push delivery. The stored payload has the Events API's shape (`head`, `before`,
 * `ref`, `size`, `distinct_size`, `commits` with `sha`), so a consumer reading
 * push_events.payload need not care how the push arrived.
 */
export function mapPushDelivery(body: unknown, receivedAt: Date): PushRow {
  const parsed = pushPayload.safeParse(body);
  if (!parsed.success) throw new MalformedDelivery(describe(parsed.error));
  const p = parsed.data;
  // Postgres cannot store U+0000: a 400 names it, where the failed insert would be a 500.
  const nul = findNul({
    ref: p.ref,
    before: p.before,
    after: p.after,
    sender: p.sender,
    repository: p.repository,
    commits: p.commits,
  });
  if (nul)
    throw new MalformedDelivery(`${nul} contains a NUL character (U+0000), which cannot be stored`);
  const commits = (p.commits ?? []).map((c) => ({
    sha: c.id,
    author: { name: c.author?.name, email: c.author?.email },
    message: c.message,
    distinct: c.distinct ?? true,
    url: c.url,
  }));
  const distinct = commits.filter((c) => c.distinct).length;
  return {
    id: null,
    actor: { id: Number(p.sender.id), login: p.sender.login },
    repository: { id: Number(p.repository.id), fullName: p.repository.full_name },
    pushId: null,
    ref: p.ref,
    head: p.after,
    before: p.before,
    createdAt: pushedAt(p.repository.pushed_at, receivedAt),
    payload: {
      repository_id: Number(p.repository.id),
      ref: p.ref,
      head: p.after,
      before: p.before,
      size: commits.length,
      distinct_size: distinct,
      commits,
    },
    size: commits.length,
    distinctSize: distinct,
  };
}
