import { quoted } from '../platform/quote.ts';

/**
 * The headers of GitHub's answers that move our schedule — `retry-after`, `x-ratelimit-reset`,
 * `X-Poll-Interval` — read as GitHub documents them and clamped (issue 27.2, ADR 0121): no
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

type Headers = Record<string, string | undefined>;

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
