import type { Reservation } from '../budget/types.ts';
import { GitHubRequestFailed } from '../github/errors.ts';
import { systemClock } from '../platform/clock.ts';
import { faultPoint } from '../platform/fault.ts';
import { clearCommitsWait, commitsShare, markCommitsWait, shareRule } from '../work/split.ts';
import type { CommitsClaim } from './claim.ts';
import {
  COMPARE_PAGE_MAX,
  COMPARE_UNPAGED_MAX,
  type CompareAnswer,
  checkAgainstPush,
  comparePath,
  type FetchedCommit,
  parseCompare,
} from './compare.ts';
import type { FetchDeps } from './outcomes.ts';

/**
 * The requests of one REST fetch (ADR 0071): reserve under the share, then the budget; send a
 * compare; page it when the push has more commits than one answer holds; drop the commits of
 * other branches' tips around it.
 */

export const GONE_STATUSES = new Set([404, 410, 451]);

export class Refused {
  readonly reason: 'budget' | 'share';
  readonly retryAt: Date | undefined;
  constructor(reason: 'budget' | 'share', retryAt?: Date) {
    this.reason = reason;
    this.retryAt = retryAt;
  }
}

export interface Sent {
  answer: CompareAnswer;
  /** Position of answer.commits[0] in the push (0 = oldest). */
  firstPosition: number;
  requests: number;
  requestId: number;
}

export interface Ctx {
  deps: FetchDeps;
  claim: CommitsClaim;
  jobId: string | null;
  base: string;
  requests: number;
  requestId: number | null;
  status: number | null;
}

export async function reserveOne(ctx: Ctx, path: string): Promise<Reservation> {
  const { db, github, config } = ctx.deps;
  const now = (ctx.deps.clock ?? systemClock).now();
  const share = await commitsShare(db, github, { ...shareRule(config, github), now });
  // Told no, commits wait (by GraphQL, the only sign of it): enrichment stops borrowing their
  // floor until a commits request is granted again.
  if (!share.allowed) {
    await markCommitsWait(db, now);
    throw new Refused('share');
  }
  const d = await github.tryReserve('commits', { jobId: ctx.jobId, path });
  if (!d.ok) {
    await markCommitsWait(db, now);
    throw new Refused('budget', d.retryAt);
  }
  if (share.commitsRefusedAt) await clearCommitsWait(db, share.commitsRefusedAt);
  return d.reservation;
}

export async function send(
  ctx: Ctx,
  path: string,
  maxCommits: number,
): Promise<CompareAnswer | null> {
  const reservation = await reserveOne(ctx, path);
  ctx.requests += 1;
  const response = await ctx.deps.github.request({
    purpose: 'commits',
    path,
    reservation,
    jobId: ctx.jobId,
  });
  faultPoint('commits.after_response');
  ctx.requestId = response.requestId;
  ctx.status = response.status;
  if (GONE_STATUSES.has(response.status)) return null;
  if (response.status !== 200) {
    throw new GitHubRequestFailed(path, response.status, 'unexpected status');
  }
  const answer = parseCompare(response.data, path, maxCommits);
  return maxCommits === COMPARE_UNPAGED_MAX
    ? checkAgainstPush(answer, path, ctx.claim.head, COMPARE_UNPAGED_MAX)
    : answer;
}

/**
 * Up to COMMITS_MAX_PER_PUSH commits of the range. Within 250: one request without paging
 * (the newest 250 and the true count). Above: pages of 100 from the oldest, one
 * reservation each, until the cap or the range ends. null: GitHub says the range is gone.
 */
export async function fetchRange(ctx: Ctx): Promise<Sent | null> {
  const { claim } = ctx;
  const cap = ctx.deps.config.commits.maxPerPush;
  const fullName = claim.fullName!;
  if (cap <= COMPARE_UNPAGED_MAX) {
    const answer = await send(
      ctx,
      comparePath(fullName, ctx.base, claim.head),
      COMPARE_UNPAGED_MAX,
    );
    if (!answer) return null;
    const kept = answer.commits.slice(-cap);
    return {
      answer: { totalCommits: answer.totalCommits, commits: kept },
      firstPosition: Math.max(0, answer.totalCommits - kept.length),
      requests: ctx.requests,
      requestId: ctx.requestId!,
    };
  }
  const commits: FetchedCommit[] = [];
  let total = 0;
  for (let page = 1; ; page++) {
    const path = comparePath(fullName, ctx.base, claim.head, { page, perPage: COMPARE_PAGE_MAX });
    const answer = await send(ctx, path, COMPARE_PAGE_MAX);
    if (!answer) return null;
    total = answer.totalCommits;
    commits.push(...answer.commits);
    const want = Math.min(total, cap);
    if (commits.length >= want || answer.commits.length < COMPARE_PAGE_MAX) break;
  }
  return {
    answer: { totalCommits: total, commits: commits.slice(0, cap) },
    firstPosition: 0,
    requests: ctx.requests,
    requestId: ctx.requestId!,
  };
}

/**
 * A new branch's range against the default branch's tip now, without what any tip the
 * records show around the push reaches: a commit stays only if it is in the
 * range against each of them too (reachable from the head and from none of the tips). A
 * range cut at 250 keeps its newest, so a commit missing from it is dropped: never one too
 * many. A tip GitHub no longer has (404) cannot be measured: nothing is kept.
 */
export async function withoutTipsAround(
  ctx: Ctx,
  sent: Sent,
  tips: readonly string[],
): Promise<Sent> {
  const { base: tipNow, status } = ctx;
  let kept = sent.answer.commits;
  try {
    for (const tip of tips) {
      if (kept.length === 0) break;
      ctx.base = tip;
      const other = await fetchRange(ctx);
      const reached = new Set(other?.answer.commits.map((c) => c.sha) ?? []);
      kept = kept.filter((c) => reached.has(c.sha));
    }
  } finally {
    // The push's answer is the one against the tip now: its status is the result's.
    ctx.base = tipNow;
    ctx.status = status;
  }
  return {
    answer: { totalCommits: kept.length, commits: kept },
    firstPosition: 0,
    requests: ctx.requests,
    requestId: ctx.requestId!,
  };
}
