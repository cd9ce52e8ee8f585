import type { GitHubClient } from '../budget/client-types.ts';
import type { EntityClass } from '../budget/types.ts';
import type { Db } from '../platform/db/pool.ts';
import { hasDueWork } from './enrichment-due.ts';
import { otherClass } from './entity.ts';
import { commitsWait, enrichmentShare, type ShareRule } from './split.ts';

/**
 * The split of enrichment's part of the background allowance between the two classes
 * (docs/architecture.md, "share, floor, split"), under the rule between enrichment and commits
 * (src/work/split.ts, ADR 0181).
 *
 * The GitHub layer enforces the hard limit (the background purposes may spend
 * floor(quota × ENRICH_SHARE) an hour of each credential). The share rule says whether
 * enrichment may spend at all (below its floor, or commits not waiting for REST), and how far
 * it reaches in the window: its floor while commits wait, else what commits left of the
 * allowance. Within that reach, while the OTHER class has due work, a class may not take more
 * than half of it (rounded up); when the other class has nothing due, the rule steps aside,
 * so the split is work-conserving: a flood of repositories can never starve ten actors, and
 * ten actors never idle a budget that repositories could use.
 *
 * The counts are a read, not a lock, so two runners deciding at the same instant can each
 * take the last slot of a half: the split may be off by the number of concurrent
 * runners. The allowance itself is still exact (the GitHub layer serializes it).
 */

export interface ShareDecision {
  allowed: boolean;
  /** Why not: enrichment is past its floor while commits wait, or this class past its half. */
  by: 'floor' | 'class' | null;
  /** What enrichment may reach in the window (the classes split it). */
  reach: number;
  /** Requests this class has taken in the window. */
  spent: number;
  /** Half of the reach (rounded up): the most a class takes while the other waits. */
  half: number;
}

export async function fairShare(
  db: Db,
  github: Pick<GitHubClient, 'credentials'>,
  cls: EntityClass,
  opts: ShareRule & { now: Date },
): Promise<ShareDecision> {
  const split = await enrichmentShare(db, github, opts);
  const spent = cls === 'actor' ? split.actor : split.repository;
  // What commits left of the allowance; only their floor's complement while they wait.
  const open = Math.max(0, split.allowance - split.commits);
  const narrow = Math.min(split.cap, open);
  if (!split.allowed) {
    return { allowed: false, by: 'floor', reach: narrow, spent, half: Math.ceil(narrow / 2) };
  }
  if (spent < Math.ceil(narrow / 2)) {
    return { allowed: true, by: null, reach: narrow, spent, half: Math.ceil(narrow / 2) };
  }
  const waits = split.otherWaits ?? (await commitsWait(db, split, opts, opts.now));
  const reach = waits ? narrow : open;
  const half = Math.ceil(reach / 2);
  if (spent < half) return { allowed: true, by: null, reach, spent, half };
  const otherWaiting = await hasDueWork(db, otherClass(cls), opts.now, opts.ttlSeconds);
  return { allowed: !otherWaiting, by: otherWaiting ? 'class' : null, reach, spent, half };
}
