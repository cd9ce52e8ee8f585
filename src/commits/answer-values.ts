import { storableText } from '../platform/json/walk.ts';

/**
 * Reading one value of an answer from GitHub (REST compare or a GraphQL batch) into what a
 * stored commit row holds: anything of the wrong type is null, never thrown or coerced.
 */

export type AnswerObject = Record<string, unknown>;

export function answerObject(v: unknown): AnswerObject | null {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as AnswerObject) : null;
}

/** Text fit to store (no NUL, valid UTF-16), cut at `max` characters. */
export function answerText(v: unknown, max: number): string | null {
  if (typeof v !== 'string') return null;
  const s = storableText(v);
  return s.length > max ? s.slice(0, max) : s;
}

/** A time GitHub wrote (ISO 8601); a long or unparsable string is null. */
export function answerTime(v: unknown): Date | null {
  if (typeof v !== 'string' || v.length > 40) return null;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? null : d;
}
