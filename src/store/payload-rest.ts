import { isRawJson } from '../platform/json/exact.ts';
import type { CommitsPlan } from './inline-commits.ts';
import type { PushRow } from './mapping.ts';

/**
 * What a push's stored `payload` keeps (ADR 0199): only what the columns do not hold. A key a
 * column stores with the same value goes; so does `commits` when the plan stores every
 * commit the payload carries (push_commits and commits hold them). What is left is kept as
 * given — a field GitHub adds tomorrow, commits that were refused or wait for the fetcher —
 * and is null when nothing is (almost every push). The export builds its lines from the
 * columns and never read the payload.
 */

/** Payload keys and the push's value each must equal to be left out. */
function heldByColumns(p: PushRow, plan: CommitsPlan): [string, unknown][] {
  return [
    ['repository_id', p.repository.id],
    ['push_id', p.pushId],
    ['size', p.size],
    ['distinct_size', plan.distinctSize],
    ['ref', p.ref],
    ['head', p.head],
    ['before', p.before],
  ];
}

/** Whether a payload value is the column's: numbers compared as decimal text (64-bit ids). */
function same(given: unknown, column: unknown): boolean {
  if (given === undefined || column === null || column === undefined) return false;
  if (typeof given === 'string') return given === column;
  if (typeof given === 'number' || typeof given === 'bigint')
    return String(given) === String(column);
  // A raw JSON number (exact parsing keeps digits a double would lose).
  return isRawJson(given) && given.rawJSON === String(column);
}

/** The payload without what the columns and the plan's commits hold; null when empty. */
export function payloadRest(p: PushRow, plan: CommitsPlan): Record<string, unknown> | null {
  const rest: Record<string, unknown> = { ...p.payload };
  for (const [key, column] of heldByColumns(p, plan)) {
    if (same(rest[key], column)) delete rest[key];
  }
  const carried = rest.commits;
  if (Array.isArray(carried) && plan.refused === null && plan.commits.length === carried.length) {
    delete rest.commits;
  }
  return Object.keys(rest).length === 0 ? null : rest;
}
