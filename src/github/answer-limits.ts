import { MAX_JSON_DEPTH, MAX_JSON_VALUES } from '../platform/json/bounded.ts';
import type { JsonStreamLimits } from '../platform/json/stream.ts';
import type { RequestKind } from './request-kind.ts';

/**
 * How much of an answer from GitHub we read, by request kind (ADR 0110 §6). The
 * cap is enforced while the body streams in: the moment it is passed, the socket is
 * destroyed and the answer is a transient failure (GITHUB_ANSWER_TOO_LARGE) that counts an
 * attempt, so a hostile or broken answer costs at most this much memory and never a crash.
 *
 * Sizes against what GitHub really sends: an events page of 100 events is 0.3–2 MB (a push
 * event carries at most 20 commits); a compare of 250 commits is a few MB, a GraphQL batch of
 * commits likewise; a user or repository profile is 2–10 KB; an App token answer under 2 KB
 * plus the repositories it lists (we never ask it to list any).
 */
export const ANSWER_MAX_BYTES: Readonly<Record<RequestKind, number>> = {
  events: 8 * 1024 * 1024,
  compare: 32 * 1024 * 1024,
  graphql: 32 * 1024 * 1024,
  profile: 1024 * 1024,
  token: 256 * 1024,
  other: 1024 * 1024,
};

/** Characters kept of one string of a streamed answer: every reader cuts at 65,536 or fewer. */
export const STREAMED_STRING_MAX = 65_537;
/**
 * Characters of text one streamed answer may hold: what the 150 MB a worker is
 * documented to stay under leaves for one answer in flight (8 MB of Latin-1 text, 16 MB at
 * most). GitHub's own answers hold far less — a batch query's ≤ 147 commits, a compare's ≤ 250
 * without its files — and one that holds more is refused as too large (a query is then split).
 */
export const STREAMED_TEXT_MAX = 8_000_000;

/**
 * The kinds whose successful answers are parsed as they stream in, never held as bytes and
 * text at once (src/platform/json/stream.ts): the answers commits read, up to 32 MB each. A compare's
 * `files` (patches) is checked but never built: nothing reads it.
 */
export const ANSWER_STREAMED: Readonly<Partial<Record<RequestKind, JsonStreamLimits>>> = {
  graphql: {
    maxDepth: MAX_JSON_DEPTH,
    maxValues: MAX_JSON_VALUES,
    maxString: STREAMED_STRING_MAX,
    maxText: STREAMED_TEXT_MAX,
  },
  compare: {
    maxDepth: MAX_JSON_DEPTH,
    maxValues: MAX_JSON_VALUES,
    maxString: STREAMED_STRING_MAX,
    maxText: STREAMED_TEXT_MAX,
    skipTopLevel: ['files'],
  },
};

/** The limits one answer is read under. */
export interface AnswerLimits {
  kind: RequestKind;
  /** Bytes of body past which the answer is refused (headers are Node's own 16 KB limit). */
  maxBytes: number;
  /** A 2xx answer of this kind is parsed as it streams in, within these limits. */
  stream?: JsonStreamLimits;
}

export function answerLimits(kind: RequestKind): AnswerLimits {
  const stream = ANSWER_STREAMED[kind];
  return { kind, maxBytes: ANSWER_MAX_BYTES[kind], ...(stream ? { stream } : {}) };
}

/** "8 MB", "256 KB", "1.5 MB": a size as a person reads it. */
export function byteSize(n: number): string {
  if (n >= 1024 * 1024) return `${+(n / (1024 * 1024)).toFixed(1)} MB`;
  if (n >= 1024) return `${+(n / 1024).toFixed(1)} KB`;
  return `${n} bytes`;
}
