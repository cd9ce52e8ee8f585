import { AppError } from '../platform/errors.ts';
import { exactId } from '../platform/json/exact.ts';
import { inspectJson, storableCopy, storableText } from '../platform/json/walk.ts';

/**
 * Reading a GitHub profile defensively: a 200 whose body is not the object GitHub
 * documents is a transient failure of that attempt (ProfileInvalid), never a crash and
 * never a row of garbage.
 */
export class ProfileInvalid extends AppError {
  constructor(path: string, problem: string) {
    super('PROFILE_INVALID', `profile from ${path} is not usable: ${problem}`, { path });
  }
}

export type Json = Record<string, unknown>;

export function asObject(data: unknown, path: string): Json {
  if (data === null || typeof data !== 'object' || Array.isArray(data)) {
    throw new ProfileInvalid(path, 'body is not a JSON object');
  }
  return data as Json;
}

/** The profile's id, exact (a decimal string: GitHub ids are 64-bit). */
export function requiredId(o: Json, path: string): string {
  const id = typeof o.id === 'string' ? null : exactId(o.id);
  if (id === null || id === '0') throw new ProfileInvalid(path, 'no numeric "id"');
  return id;
}

export function requiredString(o: Json, key: string, path: string): string {
  const v = o[key];
  if (typeof v !== 'string' || v === '') throw new ProfileInvalid(path, `no "${key}"`);
  return storableText(v);
}

/**
 * Profile text as Postgres can hold it: bytes that were not UTF-8 arrive as lone
 * surrogates (src/platform/json/utf8.ts) and, like U+0000, become U+FFFD — a label, not a key.
 */
export function str(v: unknown): string | null {
  return typeof v === 'string' ? storableText(v) : null;
}

/** The whole profile as jsonb text: a storable copy only when something in it needs one. */
export function profileJson(o: Json): string {
  const found = inspectJson(o);
  return JSON.stringify(found.badText || found.tooDeep ? storableCopy(o) : o);
}

export function int(v: unknown): number | null {
  return typeof v === 'number' && Number.isSafeInteger(v) ? v : null;
}

export function bool(v: unknown): boolean | null {
  return typeof v === 'boolean' ? v : null;
}

/** An ISO timestamp GitHub sent, or null (a malformed date is dropped, not stored). */
export function time(v: unknown): Date | null {
  if (typeof v !== 'string') return null;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? null : d;
}
