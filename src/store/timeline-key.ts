/**
 * The natural key of a push read from a GH Archive "timeline" line, the format of the
 * 2011–2014 hours (ADR 0194). Such a line has no event id and no `before`: only the compare
 * URL it links to names the old tip, abbreviated (`…/compare/ba4d721b3d...afa9b3ac30`).
 * Every other push is keyed by (repository_id, ref, before, head) with a full `before`; a
 * timeline push is keyed by the same columns with `before` holding:
 *
 * - the compare URL's abbreviation of the old tip, lower-case hex as GitHub wrote it, or
 * - `''` when the line links no compare (or one whose left side is not a commit name).
 *
 * The key keeps `before` (abbreviated) rather than dropping it because one ref can come
 * back to the same head twice (a force push back, then the same commits pushed again): the
 * old tip is what tells those pushes apart, as it does for the modern key. The same line
 * read again, from any mirror, maps to the same key, so the merge's `ON CONFLICT` stores it
 * once; the modern and timeline formats never describe the same push (GH Archive switched
 * on 2015-01-01), so the two kinds of key never meet.
 *
 * A `before` that is not a full object name is not one GitHub could be asked about: such a
 * push is never sent to commit fetching (its commits are the ones its line carries,
 * src/store/inline-commits.ts) and the export writes its `before` as null.
 */

/** A full git object name: SHA-1 (40 hex) or SHA-256 (64 hex), as GitHub writes them. */
const FULL_SHA = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
/** An abbreviated or full object name, as a compare URL's sides are written. */
const OBJECT_NAME = /^[0-9a-f]{4,64}$/;
const COMPARE = /\/compare\/([^/?#]*?)\.\.\.([^/?#]*)$/;

export function isFullSha(value: string): boolean {
  return FULL_SHA.test(value);
}

/**
 * The `before` of a timeline push's key from its line's `url`: the compare's left side
 * when it is a commit name (abbreviated or not), else `''`.
 */
export function timelineBefore(url: unknown): string {
  if (typeof url !== 'string' || url.length > 2048) return '';
  const m = COMPARE.exec(url);
  if (!m) return '';
  const left = m[1]!.toLowerCase();
  return OBJECT_NAME.test(left) ? left : '';
}
