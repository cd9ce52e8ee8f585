import { PAYLOAD_HELD } from '../../db/migrations/2026-12-05T1100_push_events_by_month.ts';
import { isRawJson } from '../platform/json/exact.ts';
import type { CommitsPlan } from './inline-commits.ts';
import type { PushRow } from './mapping.ts';

/**
 * What a push's stored `payload` keeps (ADR 0199): only what the columns do not hold. A key a
 * column stores with the same value goes, and so does `commits` when every commit it carries
 * is stored as it is given (push_commits and commits hold them, in the shape an event's
 * commits have). `payload_held` records which keys went, so SQL `push_payload(p)` gives the
 * payload back whole. What is left is kept as given — a field GitHub adds tomorrow, a
 * delivery's file lists, commits that were refused or wait for the fetcher — and is null
 * when nothing is (almost every push). The export builds its lines from the columns and
 * never read the payload.
 */

export interface PayloadSplit {
  /** The payload without what the columns hold; null when nothing is left. */
  rest: Record<string, unknown> | null;
  /** PAYLOAD_HELD bits of the keys left out. */
  held: number;
}

type Kind = 'number' | 'string';

/** Payload keys a column holds: the column's value and the JSON type the key must have. */
function heldByColumns(
  p: PushRow,
  plan: CommitsPlan,
): [keyof typeof PAYLOAD_HELD, unknown, Kind][] {
  return [
    ['repository_id', p.repository.id, 'number'],
    ['push_id', p.pushId, 'number'],
    ['size', p.size, 'number'],
    ['distinct_size', plan.distinctSize, 'number'],
    ['ref', p.ref, 'string'],
    ['head', p.head, 'string'],
    ['before', p.before, 'string'],
  ];
}

/** A payload value is the column's, of the JSON type the column gives back. */
function same(given: unknown, column: unknown, kind: Kind): boolean {
  if (given === undefined || column === null || column === undefined) return false;
  if (kind === 'string') return typeof given === 'string' && given === column;
  if (typeof given === 'number')
    return Number.isSafeInteger(given) && String(given) === String(column);
  // A raw JSON number (exact parsing keeps digits a double would lose).
  return isRawJson(given) && given.rawJSON === String(column);
}

/** Deep equality of JSON values as parsed (plain objects, arrays, primitives). */
function equal(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every(
    (k) =>
      Object.hasOwn(b, k) &&
      equal((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]),
  );
}

/**
 * Whether the payload's commits are exactly what push_payload rebuilds from the stored ones:
 * {sha, author: {email, name}, message, distinct}, with the API url of the commit under the
 * event's repository name (`withUrl`) or without one (a timeline-format line).
 */
function commitsRebuilt(
  given: unknown[],
  plan: CommitsPlan,
  fullName: string,
  withUrl: boolean,
): boolean {
  if (plan.refused !== null || plan.commits.length !== given.length) return false;
  return given.every((g, i) => {
    const s = plan.commits[i]!;
    const rebuilt: Record<string, unknown> = {
      sha: s.sha,
      author: { email: s.authorEmail, name: s.authorName },
      message: s.message,
      distinct: s.distinct,
    };
    if (withUrl) rebuilt.url = `https://api.github.com/repos/${fullName}/commits/${s.sha}`;
    return equal(g, rebuilt);
  });
}

/** The payload split into what the columns hold (bits) and the rest. */
export function payloadRest(p: PushRow, plan: CommitsPlan): PayloadSplit {
  const rest: Record<string, unknown> = { ...p.payload };
  let held = 0;
  for (const [key, column, kind] of heldByColumns(p, plan)) {
    if (same(rest[key], column, kind)) {
      delete rest[key];
      held |= PAYLOAD_HELD[key];
    }
  }
  const carried = rest.commits;
  if (Array.isArray(carried) && carried.length > 0) {
    const withUrl = carried.every(
      (c) => c !== null && typeof c === 'object' && Object.hasOwn(c, 'url'),
    );
    if (commitsRebuilt(carried, plan, p.repository.fullName, withUrl)) {
      delete rest.commits;
      held |= PAYLOAD_HELD.commits | (withUrl ? PAYLOAD_HELD.commit_urls : 0);
    }
  }
  return { rest: Object.keys(rest).length === 0 ? null : rest, held };
}
