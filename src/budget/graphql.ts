import { GitHubAuthFailed, GraphQLNeedsCredential, RateLimited } from '../github/errors.ts';
import { type GraphQLAnswer, graphqlReader } from '../github/graphql-answer.ts';
import { pointsSpacingMs, sentStatement } from '../github/pacing.ts';
import type { Config } from '../platform/config/config.ts';
import { faultPoint } from '../platform/fault.ts';
import type { ClientContext } from './client-context.ts';
import type { GraphQLRequest } from './client-types.ts';
import { labelOf } from './graphql-key.ts';
import { releaseReservation, settleAndUnlock, unsendAndUnlock } from './ledger.ts';
import { clearAuthFailures } from './rate-limits.ts';
import type { Requester } from './request.ts';
import { isBlock, type Sender, type Sent, type Unauthorized } from './send.ts';
import type { Reservation } from './types.ts';

/**
 * GitHubClient.graphql() (ADR 0110): one query on a credential's `#graphql` budget
 * key — reserved with its estimated points on the pool's GraphQL policy (the whole window is
 * commits'), sent through that key's own gate (a 10 s query never holds the credential's REST
 * gate), paced by points on the key's `/graphql` row, settled with the answer's
 * rateLimit.cost into the same ledger and rate-limit tables as REST.
 */

export const GRAPHQL_PATH = '/graphql';

/** A pacing row stands at most this far ahead of now (plus the query's own spacing). */
const MAX_AHEAD_MS = 60_000;

/**
 * The longest one query of `points` can take from its call to its answer: the gate's wait,
 * its pacing slot (at most MAX_AHEAD_MS and its own spacing ahead), and the answer's deadline
 * (connect and response). What a caller holding work for the query's sake leases it for.
 */
export function graphqlQueryBoundMs(
  github: Pick<
    Config['github'],
    'gateWaitSeconds' | 'graphqlPointsPerMinute' | 'connectTimeoutMs' | 'responseTimeoutMs'
  >,
  points: number,
): number {
  return (
    github.gateWaitSeconds * 1000 +
    MAX_AHEAD_MS +
    pointsSpacingMs(points, github.graphqlPointsPerMinute) +
    github.connectTimeoutMs +
    github.responseTimeoutMs
  );
}

export function createGraphQL(ctx: ClientContext, sender: Sender, requester: Requester) {
  const { db, clock, config } = ctx;

  async function graphql<T>(req: GraphQLRequest): Promise<GraphQLAnswer<T>> {
    const policy = ctx.graphqlPolicy;
    if (!policy) throw new GraphQLNeedsCredential();
    if (req.purpose !== 'commits') {
      throw new TypeError(`GraphQL spends commits' window only (purpose ${req.purpose})`);
    }
    if (!Number.isSafeInteger(req.points) || req.points < 1) {
      throw new TypeError(`a GraphQL query reserves an integer of points >= 1 (got ${req.points})`);
    }
    const body = JSON.stringify({ query: req.query, variables: req.variables ?? {} });
    const meta = {
      path: GRAPHQL_PATH,
      method: 'POST',
      points: req.points,
      jobId: req.jobId,
      runId: req.runId,
    };
    return requester.onPool(policy, 'commits', req, GRAPHQL_PATH, meta, (r) =>
      queryOn<T>(req, body, r),
    );
  }

  async function queryOn<T>(
    req: GraphQLRequest,
    body: string,
    reservation: Reservation,
  ): Promise<GraphQLAnswer<T>> {
    const id = reservation.id;
    const key = reservation.credential;
    const cred = ctx.byLabel.get(labelOf(key));
    const giveBack = (reason: string) =>
      releaseReservation(db, id, reason, clock.now()).catch(() => {});
    if (!cred) {
      await giveBack('reserved on a credential this process does not hold');
      throw new Error(`reservation ${id} is for ${key}, not in this pool`);
    }
    const label = cred.label;
    const spacingMs = pointsSpacingMs(req.points, config.github.graphqlPointsPerMinute);
    const reader = graphqlReader<T>({
      path: GRAPHQL_PATH,
      id,
      credential: label,
      estimate: req.points,
      now: () => clock.now(),
    });
    type Outcome = Sent<GraphQLAnswer<T>> | Unauthorized;
    let outcome: Outcome;
    try {
      outcome = await ctx.gateFor(key).run<Outcome>(
        async (entered) => {
          const slot = (entered[0]?.slot as Date | null | undefined) ?? null;
          if (!slot) {
            throw new Error(
              `github_requests ${id} is not an open reservation (already used, released or swept)`,
            );
          }
          const out = { method: 'POST' as const, path: GRAPHQL_PATH, etag: null, body };
          await req.beforeSend?.();
          return sender.sendOnce(cred, out, slot, reader);
        },
        {
          // Marked sent, its points' pacing slot taken, in the lock's own statement.
          enter: (locked) =>
            sentStatement(locked, id, {
              credential: key,
              path: GRAPHQL_PATH,
              method: 'POST',
              now: clock.now(),
              spacingMs,
              maxAheadMs: MAX_AHEAD_MS + spacingMs,
              jobId: req.jobId,
              runId: req.runId,
            }),
          leave: (o, unlock) => {
            if ('unauthorized' in o) {
              const reason = (o.unauthorized as Error).message;
              return unsendAndUnlock(id, reason, clock.now(), unlock);
            }
            if (o.error instanceof RateLimited || o.error instanceof GitHubAuthFailed) return null;
            return settleAndUnlock(db, id, o.settlement, key, o.accepted, unlock);
          },
        },
      );
    } catch (err) {
      await giveBack((err as Error).message);
      throw err;
    }
    faultPoint('github.after_settle');
    if ('unauthorized' in outcome) {
      throw await sender.authorizationFailed(cred, key, GRAPHQL_PATH, outcome.unauthorized);
    }
    const { rateLimit, result, accepted, settlement } = outcome;
    let { error } = outcome;
    if (isBlock(error)) {
      const sent = outcome as Sent<unknown>;
      error = await db
        .transaction()
        .execute((trx) => sender.writeBlock(trx, cred, key, id, GRAPHQL_PATH, sent));
    } else if (accepted && !rateLimit) {
      await clearAuthFailures(db, key);
    }
    sender.logRequest(req, 'POST', GRAPHQL_PATH, id, key, outcome as Sent<unknown>, error, {
      points: settlement.points ?? null,
      estimate: req.points,
    });
    if (error) throw error;
    return { ...result!, rateLimit };
  }

  return { graphql };
}
