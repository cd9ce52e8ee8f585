import type { CommitEmailMode } from '../config.ts';
import type { CommitsState } from '../db/schema.ts';
import type { PushCommits } from './store.ts';
import { type CommitsTargets, isTargeted, NO_TARGETS } from './targets.ts';

/**
 * What a push says about its commits when it arrives (ADR 0070), decided once per push
 * from its payload and the batch's targets: its commits_state, its commit_count and the
 * commits it carries inline (webhook deliveries, GHES-shaped events, archive lines from
 * before 2025-10 with `size` and up to 20 commits). Inline commits cost no request.
 *
 * Every payload is GitHub's or a mirror's: hostile until bounded. At most
 * MAX_INLINE_COMMITS entries are read; an entry without a well-formed sha is not stored
 * (the push is then `partial`); free text beyond its cap is cut or, for addresses, dropped.
 */

/** GitHub puts at most 2,048 commits in a push delivery (20 in an event). */
export const MAX_INLINE_COMMITS = 2048;
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

export interface CommitsPlan {
  state: CommitsState;
  /** The push's true number of commits; null while unknown. */
  count: number | null;
  /** The commits to store with the push, oldest first (position = index). */
  commits: InlineCommit[];
}

export interface PlannedPush {
  actor: { login: string };
  repository: { fullName: string };
  /** Known to be a private repository's push (see TargetedPush). */
  private?: boolean;
  ref: string;
  head: string;
  size: number | null;
  payload: Record<string, unknown>;
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
 * The plan for one push. `fromWebhook`: a delivery's array is all its commits unless it
 * holds the 2,048 GitHub caps it at (then the count is unknown); an event's or archive
 * line's count is its `size`.
 *
 * - a deleted ref (head all zeros) or a tag: `none`, count 0, nothing to fetch;
 * - every commit carried: `complete`, whoever targets it;
 * - targeted and not all carried: `pending` (the fetcher stores the whole list, so no
 *   partial inline rows whose positions it would have to reconcile);
 * - not targeted, some carried: `partial` with what was carried;
 * - not targeted, none carried (a post-2025-10 event): `skipped`.
 */
export function planCommits(
  push: PlannedPush,
  targets: CommitsTargets,
  fromWebhook: boolean,
): CommitsPlan {
  if (ZEROS.test(push.head) || push.ref.startsWith('refs/tags/')) {
    return { state: 'none', count: 0, commits: [] };
  }
  const inline = inlineCommits(push.payload);
  const count = fromWebhook
    ? inline && inline.given < MAX_INLINE_COMMITS
      ? inline.given
      : null
    : push.size;
  if (inline && count !== null && inline.given === count && inline.commits.length === count) {
    return { state: 'complete', count, commits: inline.commits };
  }
  if (isTargeted(targets, push)) return { state: 'pending', count, commits: [] };
  if (inline && inline.given > 0) return { state: 'partial', count, commits: inline.commits };
  return { state: 'skipped', count, commits: [] };
}

/**
 * Who gets commits and what their addresses become (ADR 0070), read once per batch by the
 * caller. Absent: nobody is targeted (inline commits are still stored) and addresses are
 * hashed, the defaults.
 */
export interface CommitsContext {
  targets: CommitsTargets;
  emails: CommitEmailMode;
}

export const DEFAULT_COMMITS: CommitsContext = { targets: NO_TARGETS, emails: 'hash' };

/** The inline commits of `pushes` by plan, for storeCommits (pushes without any left out). */
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
    });
  });
  return out;
}
