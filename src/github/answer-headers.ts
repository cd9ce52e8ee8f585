import { quoted } from '../platform/quote.ts';

/**
 * The headers of GitHub's answers that move our schedule — `retry-after`, `x-ratelimit-reset`,
 * `X-Poll-Interval` — read as GitHub documents them and clamped (ADR 0121): no
 * header can block a credential or put a source off for longer than GitHub's own window, and
 * none can fail a run. GitHub's rate-limit window is an hour: a wait past it is not GitHub
 * telling us something true, it is a broken or hostile answer.
 */

/** The longest any answer may make us wait: GitHub's rate-limit window. */
export const MAX_WAIT_SECONDS = 3600;
/**
 * x-ratelimit-reset is a time on GitHub's clock: one up to this much past the hour is clock
 * skew, taken as sent (GitHub's window starts at its first request; ours may lag). Past it,
 * the hour.
 */
export const RESET_SKEW_SECONDS = 60;
/** X-Poll-Interval's bounds: a poll a second at most, an hour apart at least. */
export const POLL_INTERVAL_MIN_SECONDS = 1;
export const POLL_INTERVAL_MAX_SECONDS = 3600;

/** A header we did not take as sent: clamped to a bound, or ignored (not a number we read). */
export interface HeaderNote {
  header: 'retry-after' | 'x-ratelimit-reset' | 'x-poll-interval';
  /** What GitHub sent (bounded, quoted for a log line). */
  sent: string;
  /** What we used instead: a number of seconds, a time, or "ignored". */
  used: string;
}

/** Response headers, lower-cased names (fetch and fixture files both give these). */
export type Headers = Record<string, string | undefined>;

/** What x-ratelimit-* said on an answer. */
export interface RateLimitState {
  limit: number;
  remaining: number;
  resetAt: Date;
}

/** Digits only, as GitHub sends them: no sign, fraction, exponent or `Infinity`. */
const DIGITS = /^\d+$/;

function note(header: HeaderNote['header'], sent: string, used: string): HeaderNote {
  return { header, sent: quoted(sent, 40), used };
}

/**
 * X-Poll-Interval in whole seconds, 1 s – 1 h; null when absent or not digits (the source keeps
 * the interval it had). `0.5`, `1e10`, `Infinity` and `-5` are not digits: ignored, noted.
 */
export function pollIntervalOf(headers: Headers): {
  seconds: number | null;
  note: HeaderNote | null;
} {
  const raw = headers['x-poll-interval'];
  if (raw === undefined) return { seconds: null, note: null };
  const text = raw.trim();
  if (!DIGITS.test(text)) return { seconds: null, note: note('x-poll-interval', raw, 'ignored') };
  const n = Number(text);
  const seconds = Math.min(POLL_INTERVAL_MAX_SECONDS, Math.max(POLL_INTERVAL_MIN_SECONDS, n));
  return {
    seconds,
    note: seconds === n ? null : note('x-poll-interval', raw, `${seconds} s`),
  };
}

/**
 * retry-after as seconds from `now`, at most an hour: digits (what GitHub sends) or an
 * HTTP date (what HTTP allows). null when absent or unreadable.
 */
export function retryAfterOf(
  headers: Headers,
  now: Date,
): { seconds: number | null; note: HeaderNote | null } {
  const raw = headers['retry-after'];
  if (raw === undefined) return { seconds: null, note: null };
  const text = raw.trim();
  let seconds: number;
  if (DIGITS.test(text)) seconds = Number(text);
  else {
    const at = Date.parse(text);
    // Not digits and not a date: no instruction we can follow.
    if (!/[a-z]/i.test(text) || Number.isNaN(at)) {
      return { seconds: null, note: note('retry-after', raw, 'ignored') };
    }
    seconds = Math.max(0, Math.ceil((at - now.getTime()) / 1000));
  }
  if (seconds <= MAX_WAIT_SECONDS) return { seconds, note: null };
  return { seconds: MAX_WAIT_SECONDS, note: note('retry-after', raw, `${MAX_WAIT_SECONDS} s`) };
}

/**
 * x-ratelimit-reset (epoch seconds) as a time, at most an hour after `now`; null when absent
 * or not digits (no observation, as before).
 */
export function rateLimitResetOf(
  headers: Headers,
  now: Date,
): { at: Date | null; note: HeaderNote | null } {
  const raw = headers['x-ratelimit-reset'];
  if (raw === undefined || !DIGITS.test(raw.trim())) return { at: null, note: null };
  const latest = now.getTime() + MAX_WAIT_SECONDS * 1000;
  const ms = Number(raw.trim()) * 1000;
  if (ms <= latest + RESET_SKEW_SECONDS * 1000) return { at: new Date(ms), note: null };
  const at = new Date(Math.floor(latest / 1000) * 1000);
  return { at, note: note('x-ratelimit-reset', raw, at.toISOString()) };
}

/** Every header of one answer we clamped or ignored: the client logs each once (github.header_clamped). */
export function headerNotes(headers: Headers, now: Date): HeaderNote[] {
  return [
    pollIntervalOf(headers).note,
    retryAfterOf(headers, now).note,
    rateLimitResetOf(headers, now).note,
  ].filter((n): n is HeaderNote => n !== null);
}

/** One warn line per header of an answer that was clamped or ignored. */
export function logHeaderNotes(
  log: { warn(fields: object, msg: string): void },
  headers: Headers,
  now: Date,
  context: { path: string; credential: string },
): void {
  for (const n of headerNotes(headers, now)) {
    log.warn(
      { event: 'github.header_clamped', header: n.header, sent: n.sent, used: n.used, ...context },
      `GitHub sent ${n.header}: ${n.sent} on ${context.path}; used ${n.used} (${n.used === 'ignored' ? 'not a whole number of seconds' : 'past the bound of an hour'})`,
    );
  }
}

/** A whole number a Postgres integer holds, and a count can be. */
function isCount(n: number): boolean {
  return Number.isSafeInteger(n) && n >= 0 && n <= 2_147_483_647;
}

/**
 * x-ratelimit-* as GitHub sends them on every response; null when any is missing. The reset
 * is at most an hour after `now` (below): a reset in 2286 is not GitHub's window.
 */
export function parseRateLimit(headers: Headers, now: Date = new Date()): RateLimitState | null {
  const limit = Number(headers['x-ratelimit-limit']);
  const remaining = Number(headers['x-ratelimit-remaining']);
  const reset = rateLimitResetOf(headers, now).at;
  if (
    headers['x-ratelimit-limit'] === undefined ||
    headers['x-ratelimit-remaining'] === undefined ||
    !isCount(limit) ||
    !isCount(remaining) ||
    reset === null
  ) {
    // Absent, or nothing our integer columns can hold (1.5, 1e10, -1): no observation.
    return null;
  }
  return { limit, remaining, resetAt: reset };
}

/** GitHub's documented minimum wait after a secondary limit that names no time. */
export const MIN_BACKOFF_MS = 60_000;

/**
 * Is this answer a rate-limit event, and if so, when may we try again? (GitHub's
 * rule: honour retry-after; with remaining 0 wait for the reset; otherwise at least a minute.)
 * Never more than an hour ahead (below): `retry-after: 999999999` blocked a
 * token until 2058.
 *
 * A 403 that has neither retry-after nor remaining 0 nor a rate-limit message is NOT
 * one: GitHub also answers 403 for e.g. a repository blocked for legal reasons, and
 * treating that as a budget event would retry it forever.
 */
export function rateLimitRetryAt(
  status: number,
  headers: Headers,
  message: string,
  now: Date,
): Date | null {
  if (status !== 403 && status !== 429) return null;
  const retryAfter = retryAfterOf(headers, now).seconds;
  const rl = parseRateLimit(headers, now);
  const limitedByMessage = /rate limit|abuse/i.test(message);
  if (status === 403 && !headers['retry-after'] && rl?.remaining !== 0 && !limitedByMessage) {
    return null;
  }
  if (retryAfter !== null) return new Date(now.getTime() + retryAfter * 1000);
  if (rl && rl.remaining === 0 && rl.resetAt.getTime() > now.getTime()) return rl.resetAt;
  return new Date(now.getTime() + MIN_BACKOFF_MS);
}
