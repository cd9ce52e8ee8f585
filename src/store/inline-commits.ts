import type { CommitEmailMode } from '../platform/config/config.ts';
import type { CommitSource, CommitsState } from '../platform/db/columns.ts';
import { commitListProblem } from './commit-list.ts';
import type { PushCommits } from './commits.ts';
import { type CommitsTargets, isTargeted, NO_TARGETS } from './commits-targets.ts';

/**
 * What a push says about its commits when it arrives (ADR 0070), decided once per push
 * from its payload and the batch's targets: its commits_state, its commit_count and the
 * commits it carries inline (webhook deliveries, GHES-shaped events, archive lines from
 * before 2025-10 with `size` and up to 20 commits). Inline commits cost no request.
 *
 * Every payload is GitHub's or a mirror's: hostile until bounded. At most
 * MAX_INLINE_COMMITS entries are read; an entry without a well-formed sha is not stored
 * (the push is then `partial`); free text beyond its cap is cut or, for addresses, dropped.
 * A list that breaks the rules a compare answer is held to (src/store/commit-list.ts) is
 * not stored at all, and its `size` not believed. A list from an archive nobody vouches for
 * is stored `unverified` until GitHub's answer proves it.
 */

/** GitHub puts at most 2,048 commits in a push delivery (20 in an event). */
export const MAX_INLINE_COMMITS = 2048;
/** An event (and so an archive line) lists at most this many commits: the oldest ones. */
export const EVENT_COMMITS_MAX = 20;
/**
 * GitHub's events stopped carrying commits on 2025-10-07 (and GH Archive with them): a line
 * of a later day that carries some was not written by GitHub. From the next day on, to
 * leave the day of the change its real lines.
 */
export const INLINE_COMMITS_END = new Date('2025-10-08T00:00:00Z');
const SHA = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
const NAME_CAP = 1024;
const MESSAGE_CAP = 65_536;

export interface InlineCommit {
  sha: string;
  authorName: string | null;
  /** As given: the e-mail policy is applied by storeCommits. */
  authorEmail: string | null;
  message: string | null;
  distinct: boolean | null;
}

/**
 * How a plan's state travels to the merge (a staging row's or a parameter's commits_state)
 * when a covered push waits for a credential: the merge stores it `skipped` with
 * commits_next_attempt_at set. Never stored as such.
 */
export const AWAITING_CREDENTIAL = 'awaiting';

export interface CommitsPlan {
  state: CommitsState;
  /** Covered, carrying no commits, and no credential in this process: it waits for one. */
  awaitingCredential?: true;
  /** The push's true number of commits; null while unknown. */
  count: number | null;
  /** The commits to store with the push, oldest first (position = index). */
  commits: InlineCommit[];
  /** Where the commits' text came from (the archive's, downgraded to `mirror` after 2025-10). */
  source: CommitSource;
  /** The fetcher should fetch it now (pending, or a covered unverified push). */
  due: boolean;
  /** distinct_size to store: the payload's, unless it says more than the push has. */
  distinctSize: number | null;
  /** Why the inline commits were not believed (commits_error), or null. */
  refused: string | null;
}

export interface PlannedPush {
  actor: { login: string };
  repository: { fullName: string };
  /** Known to be a private repository's push (see TargetedPush). */
  private?: boolean;
  ref: string;
  head: string;
  size: number | null;
  distinctSize?: number | null;
  /** When the push was made: an archive line after INLINE_COMMITS_END is a mirror's claim. */
  createdAt?: Date;
  payload: Record<string, unknown>;
  /** A timeline-format line's push: no full `before`, never fetched (src/store/timeline-key.ts). */
  timeline?: true;
}

const ZEROS = /^0+$/;

function text(v: unknown, cap: number, over: 'cut' | 'drop'): string | null {
  if (typeof v !== 'string') return null;
  if (v.length <= cap) return v;
  return over === 'cut' ? v.slice(0, cap) : null;
}

/** The payload's commits as given, oldest first (GitHub's order), or null when it has none. */
export function inlineCommits(payload: Record<string, unknown>): {
  commits: InlineCommit[];
  given: number;
} | null {
  const raw = payload.commits;
  if (!Array.isArray(raw)) return null;
  const commits: InlineCommit[] = [];
  const n = Math.min(raw.length, MAX_INLINE_COMMITS);
  for (let i = 0; i < n; i++) {
    const c = raw[i] as Record<string, unknown> | null;
    if (c === null || typeof c !== 'object' || Array.isArray(c)) continue;
    // Events say `sha`; a delivery mapped by src/webhooks/push.ts says it too.
    const sha = c.sha ?? c.id;
    if (typeof sha !== 'string' || !SHA.test(sha)) continue;
    const author =
      c.author !== null && typeof c.author === 'object' && !Array.isArray(c.author)
        ? (c.author as Record<string, unknown>)
        : {};
    commits.push({
      sha,
      authorName: text(author.name, NAME_CAP, 'drop'),
      authorEmail: text(author.email, NAME_CAP, 'drop'),
      message: text(c.message, MESSAGE_CAP, 'cut'),
      distinct: typeof c.distinct === 'boolean' ? c.distinct : null,
    });
  }
  return { commits, given: raw.length };
}

/**
 * Where inline commits come from, as the caller knows it: `github` (a polled event: GitHub's
 * own answer), `webhook`, `archive` (GH Archive's own mirror, or a file named on the command
 * line) or `mirror` (any other archive). An archive line of a push made after
 * INLINE_COMMITS_END counts as a mirror's, whoever served it.
 */
export function inlineSource(
  given: CommitSource,
  push: Pick<PlannedPush, 'createdAt'>,
): CommitSource {
  if (given !== 'archive') return given;
  return push.createdAt && push.createdAt.getTime() >= INLINE_COMMITS_END.getTime()
    ? 'mirror'
    : 'archive';
}

/** distinct_size as stored: never more than the push's commits (a mirror's 1e9 is no count). */
function distinctOf(push: PlannedPush, count: number | null): number | null {
  const d = push.distinctSize ?? null;
  if (d === null) return null;
  const bound = count ?? push.size;
  return bound !== null && d > bound ? null : d;
}

/**
 * The plan for one push. `given`: where its payload came from (see inlineSource); a
 * webhook's array is all its commits unless it holds the 2,048 GitHub caps it at (then the
 * count is unknown); an event's or archive line's count is its `size`.
 *
 * - a deleted ref (head all zeros) or a tag: `none`, count 0, nothing to fetch;
 * - commits carried that break the rules of a commit list (a sha twice, shas unlike the
 *   head's, more than `size`, fewer than a `size` that fits an event, a whole list that does
 *   not end with the head): not stored, `size` not believed (count NULL), `commits_error`
 *   says why; then as if none were carried;
 * - commits carried by a mirror (or after 2025-10): `unverified`, stored as evidence, due
 *   for the fetcher when targeted (GitHub's answer replaces them);
 * - every commit carried: `complete`, whoever targets it;
 * - targeted and not all carried: `pending` (the fetcher stores the whole list, so no
 *   partial inline rows whose positions it would have to reconcile); without a credential
 *   in the process and none carried, `skipped` awaiting one, and with some carried,
 *   `partial` with them (what is there now beats a later fetch of the rest);
 * - not targeted, some carried: `partial` with what was carried;
 * - not targeted, none carried (a post-2025-10 event): `skipped`;
 * - a timeline-format push (no full `before`): `complete` when it carries every commit,
 *   else `partial` with what it carries (none, when its list is refused), never due.
 */
export function planCommits(
  push: PlannedPush,
  targets: CommitsTargets,
  given: CommitSource,
): CommitsPlan {
  const source = inlineSource(given, push);
  const plan = (
    state: CommitsState,
    count: number | null,
    commits: InlineCommit[] = [],
    refused: string | null = null,
  ): CommitsPlan => ({
    state,
    count,
    commits,
    source,
    due: state === 'pending' || (state === 'unverified' && isTargeted(targets, push)),
    distinctSize: refused === null ? distinctOf(push, count) : null,
    refused,
  });
  if (ZEROS.test(push.head) || push.ref.startsWith('refs/tags/')) return plan('none', 0);
  const fromWebhook = source === 'webhook';
  const inline = inlineCommits(push.payload);
  const count = fromWebhook
    ? inline && inline.given < MAX_INLINE_COMMITS
      ? inline.given
      : null
    : push.size;
  let refused: string | null = null;
  if (inline) {
    refused = commitListProblem(
      inline.commits.map((c) => c.sha),
      {
        total: count ?? Number.MAX_SAFE_INTEGER,
        head: push.head,
        ...(fromWebhook ? {} : { capacity: EVENT_COMMITS_MAX, cutFrom: 'newest' as const }),
        countName: fromWebhook ? 'the delivery' : 'size',
        listed: inline.given,
      },
    );
  }
  // A timeline push has no full `before` to ask GitHub about: what its line carries is all
  // there will be, whoever covers it and whoever served the line.
  if (push.timeline) {
    if (refused !== null) return plan('partial', null, [], `inline commits refused: ${refused}`);
    const all =
      inline !== null &&
      count !== null &&
      inline.given === count &&
      inline.commits.length === count;
    return plan(all ? 'complete' : 'partial', count, inline?.commits ?? []);
  }
  const targeted = isTargeted(targets, push);
  if (refused !== null) {
    const why = `inline commits refused: ${refused}`;
    return plan(targeted ? 'pending' : 'skipped', null, [], why);
  }
  if (inline && source === 'mirror') return plan('unverified', count, inline.commits);
  if (inline && count !== null && inline.given === count && inline.commits.length === count) {
    return plan('complete', count, inline.commits);
  }
  const carried = inline !== null && inline.given > 0;
  if (targeted) {
    if (targets.credential !== false) return plan('pending', count);
    if (!carried) return { ...plan('skipped', count), awaitingCredential: true };
  }
  if (carried) return plan('partial', count, inline.commits);
  return plan('skipped', count);
}

/** The commits_state a plan is staged with: its state, or AWAITING_CREDENTIAL. */
export function stagedState(plan: CommitsPlan): string {
  return plan.awaitingCredential ? AWAITING_CREDENTIAL : plan.state;
}

/**
 * Who gets commits and what their addresses become, read once per batch by the caller.
 * Absent: nobody is targeted (inline commits are still stored) and addresses are hashed,
 * the defaults.
 */
export interface CommitsContext {
  targets: CommitsTargets;
  emails: CommitEmailMode;
}

export const DEFAULT_COMMITS: CommitsContext = { targets: NO_TARGETS, emails: 'hash' };

/**
 * The inline commits of `pushes` by plan, for storeCommits (pushes without any left out).
 * Each carries its plan's state and source: its rows join a push held in that state only,
 * so a line read after the push was stored otherwise (pending, proven) adds none.
 */
export function inlineCommitRows(
  pushes: readonly { repository: { id: string }; ref: string; before: string; head: string }[],
  plans: readonly CommitsPlan[],
): PushCommits[] {
  const out: PushCommits[] = [];
  pushes.forEach((p, i) => {
    const plan = plans[i]!;
    if (plan.commits.length === 0) return;
    out.push({
      push: { repositoryId: p.repository.id, ref: p.ref, before: p.before, head: p.head },
      commits: plan.commits,
      source: plan.source,
      ifState: plan.state,
    });
  });
  return out;
}

/**
 * A push's inline commits as the list columns of its push_events row (commit_flags,
 * commit_shas or commit_sha_texts; commit_first_position is null, the list starting at 0),
 * encoded exactly as storeCommits encodes them (src/store/commits.ts), so the merge inserts a
 * new push with its list and its row is written once. Null when there is no list, or when a
 * commit's `distinct` is not given: storeCommits decides it against the commits held.
 */
export interface InsertedList {
  flags: string;
  /** The shas concatenated as hex, when all are 40-hex or all 64-hex. */
  shaHex: string | null;
  /** The shas as text otherwise. */
  shaTexts: string[] | null;
}

export function insertedList(plan: CommitsPlan): InsertedList | null {
  const commits = plan.commits;
  if (commits.length === 0) return null;
  let flags = '';
  // Every sha of a plan is 40 or 64 lowercase hex digits (inlineCommits skips any other),
  // so one length is one hex string; mixed lengths go as texts, which need no escaping in
  // an array literal or a COPY line (textArray quotes them all the same).
  let width = commits[0]!.sha.length;
  for (const c of commits) {
    if (c.distinct === null) return null;
    flags += c.distinct ? 't' : 'f';
    if (c.sha.length !== width) width = 0;
  }
  const shas = commits.map((c) => c.sha);
  return width > 0
    ? { flags, shaHex: shas.join(''), shaTexts: null }
    : { flags, shaHex: null, shaTexts: shas };
}
