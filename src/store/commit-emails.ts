import { createHash } from 'node:crypto';
import type { CommitEmailMode } from '../platform/config/config.ts';
import { isRawJson } from '../platform/json/exact.ts';

/**
 * COMMIT_EMAILS, everywhere an address can be stored, logged or exported (ADR 0193).
 *
 * `addressUnderPolicy` is the rule, and the only one: what ONE address becomes. Everything
 * else applies it — to an address field (a commit's author or committer, wherever it sits:
 * a `commits` row, a payload's commit list, a rejected event), and to every address
 * written inside free text (a `Signed-off-by:` trailer in a message, a name that is an
 * address, a line of an archive quoted in an error). A new policy is one more case here.
 *
 * `keep` returns everything as given; `hash` and `drop` leave no address in clear.
 * `gharchive` is GH Archive's own rule, and only that: an address field (a value under an
 * `email` key, a commit's address column) becomes the SHA-1 of its local part, `@`, and its
 * domain, while text (messages, names) stays as given, as GH Archive publishes it — only an
 * `"email": "…"` field quoted inside text (a raw line) is put under the rule, as parsed it
 * would have been.
 */

const HASHED = /^sha256:[0-9a-f]{64}$/;

/**
 * An address inside text: a local part, `@`, and a domain of dot-separated labels ending in
 * letters. The alphabetic last label keeps `lodash@4.17.21` or `node@20.1.0` out.
 */
const ADDRESS_IN_TEXT =
  /[A-Za-z0-9._%+'!#$&*=?^`{|}~/-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,63}\b/g;

/** What one address becomes under `mode` (null: dropped). */
export function addressUnderPolicy(
  address: string | null | undefined,
  mode: CommitEmailMode,
): string | null {
  if (address === null || address === undefined || mode === 'drop') return null;
  if (mode === 'keep') return address;
  if (mode === 'gharchive') return HASHED.test(address) ? address : gharchiveAddress(address);
  // Hashed already (another instance's hour file): hashing it again would join it to
  // nothing, where as it is it joins the same address hashed here.
  if (HASHED.test(address)) return address;
  const normal = address.trim().toLowerCase();
  if (normal === '') return null;
  // An archive hour names the same few addresses again and again (a push's payload and its
  // commit rows, a pusher's every push): hashed once each, within a bound.
  let hashed = HASHES.get(normal);
  if (hashed === undefined) {
    if (HASHES.size >= HASHES_KEPT) HASHES.clear();
    hashed = `sha256:${createHash('sha256').update(normal, 'utf8').digest('hex')}`;
    HASHES.set(normal, hashed);
  }
  return hashed;
}

const HASHES = new Map<string, string>();
const HASHES_KEPT = 10_000;

const SHA1_HEX = /^[0-9a-f]{40}$/;

/**
 * What GH Archive's crawler writes for an address (igrigorik/gharchive.org, crawler.rb's
 * `@clean`, since 2021 obfuscate.rb): Ruby's `email.split("@")` — pieces between the `@`s,
 * trailing empty ones removed — then the SHA-1 hex of the first piece joined by `@` to the
 * second when there is one. So `a@b@c` keeps `b` only, `a@` and `a` become the bare digest,
 * `@b` the digest of the empty string at `b`, `a@@b` the digest and a bare `@`. An empty
 * address stays empty (the crawler skips it). An address made of `@`s only, on which the
 * crawler fails, becomes the digest of the empty string. A first piece that is 40 hex digits
 * already is GH Archive's own digest (every line since 2012): kept as it is, so that an
 * archive line written back out is the line read.
 */
function gharchiveAddress(address: string): string {
  if (address === '') return '';
  const pieces = address.split('@');
  while (pieces.length > 0 && pieces[pieces.length - 1] === '') pieces.pop();
  const local = pieces[0] ?? '';
  if (SHA1_HEX.test(local)) return address;
  let digest = SHA1S.get(local);
  if (digest === undefined) {
    if (SHA1S.size >= HASHES_KEPT) SHA1S.clear();
    digest = createHash('sha1').update(local, 'utf8').digest('hex');
    SHA1S.set(local, digest);
  }
  return pieces.length > 1 ? `${digest}@${pieces[1]}` : digest;
}

const SHA1S = new Map<string, string>();

const EMAIL_KEY = /"email"/i;

/** A JSON `"email": "…"` member inside text (a raw line quoted in a message or a log). */
const EMAIL_MEMBER = /("email"\s*:\s*)"((?:[^"\\]|\\.)*)"/gi;

/** Text under `gharchive`: as given, but for the address fields of JSON quoted in it. */
function gharchiveText(text: string): string {
  return text.replace(EMAIL_MEMBER, (whole, key: string, body: string) => {
    let value: unknown;
    try {
      value = JSON.parse(`"${body}"`);
    } catch {
      return whole;
    }
    return typeof value === 'string' ? `${key}${JSON.stringify(gharchiveAddress(value))}` : whole;
  });
}

/** Free text with every address in it under `mode` (a dropped one leaves nothing). */
export function textUnderPolicy(text: string, mode: CommitEmailMode): string;
export function textUnderPolicy(text: string | null, mode: CommitEmailMode): string | null;
export function textUnderPolicy(
  text: string | null | undefined,
  mode: CommitEmailMode,
): string | null;
export function textUnderPolicy(
  text: string | null | undefined,
  mode: CommitEmailMode,
): string | null {
  if (text === null || text === undefined) return null;
  if (mode === 'gharchive') return EMAIL_KEY.test(text) ? gharchiveText(text) : text;
  if (mode === 'keep' || !text.includes('@')) return text;
  return text.replace(ADDRESS_IN_TEXT, (found) => addressUnderPolicy(found, mode) ?? '');
}

/** Keys whose string value is an address field (not text that may hold one). */
const ADDRESS_KEYS = new Set(['email']);

/**
 * A JSON value (a payload, a rejected event) with every address under `mode`: a value
 * under an `email` key is an address field (the policy's value, null when dropped), every
 * other string and every key is text. Returns `value` itself when nothing in it changed,
 * and never mutates it.
 */
export function jsonUnderPolicy<T>(value: T, mode: CommitEmailMode): T {
  if (mode === 'keep') return value;
  return walk(value, mode, false) as T;
}

function walk(v: unknown, mode: CommitEmailMode, addressField: boolean): unknown {
  if (typeof v === 'string') {
    return addressField ? addressUnderPolicy(v, mode) : textUnderPolicy(v, mode);
  }
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) {
    let out: unknown[] | null = null;
    for (let i = 0; i < v.length; i++) {
      const next = walk(v[i], mode, false);
      if (next !== v[i]) {
        out ??= v.slice();
        out[i] = next;
      }
    }
    return out ?? v;
  }
  // A plain object: an exact number (RawJSON) or a class instance is not text.
  if (isRawJson(v)) return v;
  const proto = Object.getPrototypeOf(v);
  if (proto !== Object.prototype && proto !== null) return v;
  const o = v as Record<string, unknown>;
  let out: Record<string, unknown> | null = null;
  for (const [key, value] of Object.entries(o)) {
    const k = textUnderPolicy(key, mode);
    const next = walk(value, mode, ADDRESS_KEYS.has(key.toLowerCase()));
    if (out === null && (k !== key || next !== value)) {
      out = {};
      for (const [k0, v0] of Object.entries(o)) {
        if (k0 === key) break;
        out[k0] = v0;
      }
    }
    if (out !== null) out[k] = next;
  }
  return out ?? o;
}

/**
 * A JSON value's text as stored (jsonb), under `mode`. The common case — no `@` anywhere —
 * costs one scan of the text it had to produce anyway.
 */
export function jsonTextUnderPolicy(value: unknown, mode: CommitEmailMode): string {
  const text = JSON.stringify(value) ?? 'null';
  if (mode === 'keep') return text;
  // Under gharchive only an `email` member changes, and it need not hold an `@`.
  if (mode === 'gharchive' ? !EMAIL_KEY.test(text) : !text.includes('@')) return text;
  const under = jsonUnderPolicy(value, mode);
  return under === value ? text : (JSON.stringify(under) ?? 'null');
}
