import type { RequestKind } from './request-kind.ts';

/**
 * How much of an answer from GitHub we read, by request kind (ADR 0110 §6, ADR 0120). The
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

/** The limits one answer is read under. */
export interface AnswerLimits {
  kind: RequestKind;
  /** Bytes of body past which the answer is refused (headers are Node's own 16 KB limit). */
  maxBytes: number;
}

export function answerLimits(kind: RequestKind): AnswerLimits {
  return { kind, maxBytes: ANSWER_MAX_BYTES[kind] };
}

/** "8 MB", "256 KB", "1.5 MB": a size as a person reads it. */
export function byteSize(n: number): string {
  if (n >= 1024 * 1024) return `${+(n / (1024 * 1024)).toFixed(1)} MB`;
  if (n >= 1024) return `${+(n / 1024).toFixed(1)} KB`;
  return `${n} bytes`;
}
