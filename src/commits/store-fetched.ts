import type { CommitEmailMode } from '../platform/config/config.ts';
import type { Db } from '../platform/db/pool.ts';
import { storeCommits } from '../store/commits.ts';
import type { CommitsClaim } from './claim.ts';
import type { CompareAnswer } from './compare.ts';
import { countGraphQLSettled } from './graphql/settled.ts';
import { markFetched } from './state.ts';

/**
 * A compare answer into the tables, in ONE transaction: the push's state (only while the
 * lease is still ours; otherwise nothing at all is written), its commits and its
 * push_commits rows. GitHub's answer is the push's list: it replaces the rows a mirror left
 * (an `unverified` push) and rewrites their text (ADR 0184); stored twice it adds nothing,
 * so a fetch repeated after a crash between the answer and this commit adds no row twice.
 */
export async function storeFetched(
  db: Db,
  claim: CommitsClaim,
  answer: CompareAnswer,
  opts: {
    firstPosition: number;
    emails: CommitEmailMode;
    now: Date;
    /** A new branch whose default-branch tip at push time is unknown: `partial`, count NULL. */
    countUnknown?: boolean;
    /** Proven by a GraphQL batch: counted in commits_graphql_minutes (pushes a point). */
    byGraphQL?: boolean;
  },
): Promise<{
  applied: boolean;
  state: 'complete' | 'partial';
  newCommits: number;
  newActors: number;
}> {
  const n = answer.commits.length;
  const state = n >= answer.totalCommits && !opts.countUnknown ? 'complete' : 'partial';
  return db.transaction().execute(async (trx) => {
    const applied = await markFetched(trx, claim, {
      state,
      commitCount: opts.countUnknown ? null : answer.totalCommits,
    });
    if (!applied) return { applied, state, newCommits: 0, newActors: 0 };
    const push = {
      repositoryId: claim.repositoryId,
      ref: claim.ref,
      before: claim.before,
      head: claim.head,
    };
    const stored = await storeCommits(
      trx,
      [{ push, commits: answer.commits, firstPosition: opts.firstPosition, source: 'github' }],
      { emails: opts.emails, replace: true },
    );
    if (opts.byGraphQL) await countGraphQLSettled(trx, claim.repositoryId, opts.now);
    return { applied, state, newCommits: stored.commits, newActors: stored.newActors };
  });
}
