/**
 * What any list of a push's commits must be to be believed, whoever gives it: a compare
 * answer from GitHub (src/commits/compare.ts) or the commits carried inline by an event, a
 * webhook delivery or an archive line (src/store/inline-commits.ts). One set of rules, so a
 * mirror's line is held to what GitHub's own answer is held to (ADR 0184).
 *
 * - no sha listed twice;
 * - every sha as long as the push's head (a SHA-1 repository's commits are 40 hex, a
 *   SHA-256 one's 64: one push never mixes them);
 * - never more commits than the count the source gives;
 * - all of them when the count fits in what the source can hold;
 * - the head last, whenever the list reaches the newest commit: a list that is whole, or
 *   one that the source cuts from the oldest end (compare's newest 250).
 */

export interface CommitListRules {
  /** The push's true number of commits, as the source says. */
  total: number;
  /** The head the list must end with when it reaches the newest commit (absent: not checked). */
  head?: string;
  /** The most commits the source lists at once: a smaller total must be listed whole. */
  capacity?: number;
  /**
   * Which end a source cuts a long list from: `oldest` (compare keeps the newest, so its
   * last commit is always the head) or `newest` (an event lists the oldest 20).
   */
  cutFrom?: 'oldest' | 'newest';
  /** What the source calls its count, for the message (`total_commits`, `size`). */
  countName?: string;
  /**
   * How many entries the source listed, readable or not (default: `shas.length`): an event
   * entry without a well-formed sha is left out of `shas` but still counts as listed.
   */
  listed?: number;
}

/** Why `shas` cannot be the push's commits as the source says, or null when they can be. */
export function commitListProblem(shas: readonly string[], rules: CommitListRules): string | null {
  const seen = new Set<string>();
  for (const sha of shas) {
    if (seen.has(sha)) return `${sha} is listed twice`;
    seen.add(sha);
  }
  if (rules.head !== undefined) {
    const odd = shas.find((sha) => sha.length !== rules.head!.length);
    if (odd !== undefined) {
      return `${odd} is ${odd.length} characters where the head ${rules.head} is ${rules.head.length}`;
    }
  }
  const count = rules.countName ?? 'the count';
  const listed = rules.listed ?? shas.length;
  if (listed > rules.total) return `${listed} commits where ${count} says ${rules.total}`;
  if (rules.capacity !== undefined && rules.total <= rules.capacity && listed !== rules.total) {
    return `${listed} commits where ${count} says ${rules.total}`;
  }
  const whole = shas.length === rules.total;
  const last = shas.at(-1);
  if (
    rules.head !== undefined &&
    last !== undefined &&
    (whole || rules.cutFrom === 'oldest') &&
    last !== rules.head
  ) {
    return `the last commit is ${last}, not the head ${rules.head}`;
  }
  return null;
}
