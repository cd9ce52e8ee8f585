import {
  type AnswerError,
  type BatchItem,
  type BuiltQuery,
  buildQuery,
  planBatches,
  readItem,
} from './graphql-batch.ts';
import {
  type Ask,
  firstAsks,
  judge,
  newEvidence,
  type ProofLimits,
  type PushEvidence,
  type Verdict,
} from './graphql-proof.ts';

/**
 * Rounds of batched queries until every push has a verdict (ADR 0111). Each round asks,
 * for every push still open, what its proof needs next; the asks of many pushes go into
 * queries of at most `maxRequests` GitHub requests (149 round to 1 point). A part GitHub
 * refused as too heavy (RESOURCE_LIMITS_EXCEEDED) is split and asked again; what an answer
 * did hold is kept. A whole query that failed (a 5xx, a timeout, an answer over its cap, one
 * that is not JSON or is empty: ADR 0182) is split in two and asked again only until the
 * batch has seen `maxQueryFailures` of them: then the breaker opens, no query is sent any
 * more, and every push without a verdict is `unanswered` (the fetcher gives it to REST). A
 * push marked `alone` (a suspect of a batch that died) is asked in queries of its own. The
 * transport is given (`send`): the fetcher passes github.graphql(), the bench and the unit
 * tests the fake's executor.
 */

export interface RoundPush {
  key: string;
  fullName: string;
  repositoryId: string;
  head: string;
  /** The push's before, a proven default-branch tip, or null: see `baseFrom`. */
  base: string | null;
  /**
   * `before`: an ordinary push. `first-push`: no base, the whole history. `default-now`:
   * a new branch whose default-branch tip at push time is unknown: the tip now is read in
   * the first round and used as the base (its result is then never `complete` with 0).
   */
  baseFrom: 'before' | 'first-push' | 'default-tip' | 'default-now';
  /** Asked in queries of its own: a batch query about it died once (ADR 0182). */
  alone?: boolean;
}

export interface SendResult {
  data: Record<string, unknown> | null;
  errors: readonly AnswerError[];
}

/** Codes of the errors that are a whole query's failure (by the errors' stable codes). */
const QUERY_FAILURE_CODES = new Set([
  'GITHUB_UNAVAILABLE',
  'GITHUB_TIMEOUT',
  'GITHUB_UNREACHABLE',
  'GITHUB_ANSWER_TOO_LARGE',
  'GITHUB_ANSWER_TIMEOUT',
  'MALFORMED_RESPONSE',
  'GITHUB_REQUEST_FAILED',
]);

/**
 * Thrown by `send` for a query that got no usable answer at all (5xx, timeout, over the cap,
 * not JSON, empty): the ladder's kind of failure. Anything else (a rate limit, the budget,
 * bad credentials, a bug) stops the rounds.
 */
export function isQueryFailure(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' && QUERY_FAILURE_CODES.has(code);
}

/** Whole-query failures a batch takes before it stops asking GraphQL (the breaker). */
export const MAX_QUERY_FAILURES = 3;

export type Final =
  | Exclude<Verdict, { kind: 'more' }>
  | { kind: 'unfinished'; reason: string }
  /**
   * GraphQL gave no verdict: the breaker opened. `failed`: a query about this push failed
   * (it is charged an attempt if REST cannot take it); else it was not asked, or answered.
   */
  | { kind: 'unanswered'; reason: string; failed: boolean }
  /** Its claim was no longer ours when a query about it was to be sent: not asked. */
  | { kind: 'lost' };

export interface ProveResult {
  verdicts: Map<string, Final>;
  evidence: Map<string, PushEvidence>;
  /** The default branch GitHub named for a push that asked (a renamed default branch shows). */
  defaultBranches: Map<string, string>;
  queries: number;
  points: number;
  requests: number;
  /** A transport error that ended the rounds (rate limit, budget): the rest are unfinished. */
  stoppedBy: unknown;
  /** Whole queries that failed, and the last failure (the breaker opens at maxQueryFailures). */
  queryFailures: number;
  lastQueryFailure: unknown;
}

export interface ProveOptions {
  limits: ProofLimits;
  maxRequests: number;
  /** How deep the first round reads the base's history (oids only: 1 request whatever). */
  baseFirst?: number;
  /** A whole query's failure (default isQueryFailure): split, until the breaker opens. */
  isQueryFailure?: (err: unknown) => boolean;
  /** Whole-query failures before the breaker opens (default MAX_QUERY_FAILURES). */
  maxQueryFailures?: number;
  /**
   * Before each query, the keys it is about to ask about; returns those whose claims are no
   * longer ours (left out of it, verdict `lost`). The fetcher renews the batch's leases here.
   */
  beforeQuery?: (keys: readonly string[]) => Promise<ReadonlySet<string>>;
}

interface Open {
  push: RoundPush;
  ev: PushEvidence;
  asks: Ask[];
  defaultBranch: boolean;
  splits: number;
  /** A query about it failed (whole), in this round or an earlier one. */
  failed?: boolean;
}

export async function proveAll(
  pushes: readonly RoundPush[],
  send: (q: BuiltQuery, keys: readonly string[]) => Promise<SendResult>,
  opts: ProveOptions,
): Promise<ProveResult> {
  const out: ProveResult = {
    verdicts: new Map(),
    evidence: new Map(),
    defaultBranches: new Map(),
    queries: 0,
    points: 0,
    requests: 0,
    stoppedBy: null,
    queryFailures: 0,
    lastQueryFailure: null,
  };
  const isFailure = opts.isQueryFailure ?? isQueryFailure;
  const maxFailures = opts.maxQueryFailures ?? MAX_QUERY_FAILURES;
  const breakerOpen = () => out.queryFailures >= maxFailures;
  const failedOn = new Set<string>();
  /** The breaker is open: no more queries; every push without a verdict is unanswered. */
  const unanswered = (o: Open) => {
    const why = (out.lastQueryFailure as Error | null)?.message ?? 'no answer';
    out.verdicts.set(o.push.key, {
      kind: 'unanswered',
      reason: `GraphQL failed ${out.queryFailures} queries of this batch (last: ${why.slice(0, 200)})`,
      failed: o.failed === true || failedOn.has(o.push.key),
    });
  };
  // Few pushes: one query of 1 point has room to read each one deep at once (most pushes
  // proven in one round); many: the cheapest first round, the rest sized by the counts.
  const per = Math.floor(opts.maxRequests / Math.max(1, pushes.length));
  let open: Open[] = pushes.map((push) => {
    const ev = newEvidence(push.head, push.base);
    out.evidence.set(push.key, ev);
    if (per >= 4) {
      const walk: Ask = { kind: 'walk', from: push.head, first: Math.min(100, per - 2) };
      const asks: Ask[] = push.base
        ? [walk, { kind: 'base', first: opts.baseFirst ?? 100, after: null }]
        : [walk];
      return { push, ev, asks, defaultBranch: push.baseFrom === 'default-now', splits: 0 };
    }
    const asks =
      push.baseFrom === 'default-now'
        ? [{ kind: 'walk', from: push.head, first: 1 } as Ask]
        : firstAsks(ev, opts.baseFirst);
    return { push, ev, asks, defaultBranch: push.baseFrom === 'default-now', splits: 0 };
  });

  const settle = (o: Open): Open | null => {
    if (o.push.baseFrom === 'default-now' && o.ev.base === null) return null; // handled by the caller
    const v = judge(o.ev, opts.limits);
    if (v.kind === 'more') return { ...o, asks: v.asks, defaultBranch: false };
    out.verdicts.set(o.push.key, v);
    return null;
  };

  const item = (o: Open): BatchItem => ({
    fullName: o.push.fullName,
    repositoryId: o.push.repositoryId,
    asks: o.asks,
    defaultBranch: o.defaultBranch,
  });

  async function run(asked: Open[]): Promise<Open[]> {
    if (breakerOpen()) {
      for (const o of asked) unanswered(o);
      return [];
    }
    const lost = opts.beforeQuery ? await opts.beforeQuery(asked.map((o) => o.push.key)) : null;
    const batch = lost?.size ? asked.filter((o) => !lost.has(o.push.key)) : asked;
    for (const o of asked)
      if (lost?.has(o.push.key)) out.verdicts.set(o.push.key, { kind: 'lost' });
    if (batch.length === 0) return [];
    const q = buildQuery(
      batch.map(item),
      batch.map((o) => o.ev.base),
    );
    let answer: SendResult;
    try {
      out.queries += 1;
      out.requests += q.requests;
      out.points += q.points;
      answer = await send(
        q,
        batch.map((o) => o.push.key),
      );
    } catch (err) {
      if (!isFailure(err)) throw err;
      // A whole query failed (the ladder's kind): halved and asked again while the breaker
      // is closed, never down to a query a push — a few failures and GraphQL stops.
      out.queryFailures += 1;
      out.lastQueryFailure = err;
      for (const o of batch) {
        o.failed = true;
        failedOn.add(o.push.key);
      }
      if (batch.length === 1 || breakerOpen()) {
        if (!breakerOpen()) {
          // Alone and still failing: GraphQL has nothing more to try for it.
          out.verdicts.set(batch[0]!.push.key, {
            kind: 'unanswered',
            reason: `GraphQL could not answer it (${(err as Error).message.slice(0, 200)})`,
            failed: true,
          });
        } else for (const o of batch) unanswered(o);
        return [];
      }
      const half = Math.ceil(batch.length / 2);
      return [...(await run(batch.slice(0, half))), ...(await run(batch.slice(half)))];
    }
    const next: Open[] = [];
    const retry: Open[] = [];
    batch.forEach((o, i) => {
      const r = readItem(answer.data, answer.errors, i, item(o), o.ev);
      if (r.kind === 'gone')
        out.verdicts.set(o.push.key, { kind: 'gone', reason: `${o.push.fullName}: NOT_FOUND` });
      else if (r.kind === 'invalid')
        out.verdicts.set(o.push.key, { kind: 'invalid', reason: r.why });
      else if (r.kind === 'unanswered') retry.push(o);
      else {
        if (r.defaultBranch) out.defaultBranches.set(o.push.key, r.defaultBranch.name);
        if (o.push.baseFrom === 'default-now' && o.ev.base === null) {
          const tip = r.defaultBranch?.tip ?? null;
          if (!tip) {
            out.verdicts.set(o.push.key, {
              kind: 'fallback',
              reason: 'the repository has no default branch tip',
            });
            return;
          }
          o.ev.base = tip;
          o.ev.baseOids.add(tip);
          o.ev.baseOrder.push(tip);
          next.push({
            ...o,
            asks: [{ kind: 'base', first: opts.baseFirst ?? 100, after: null }],
            defaultBranch: false,
          });
          return;
        }
        const s = settle(o);
        if (s) next.push(s);
      }
    });
    if (retry.length > 0) {
      // The part GitHub refused: smaller, once more each; kept answers stay kept.
      if (retry.length === 1 && retry[0]!.splits >= 2) {
        out.verdicts.set(retry[0]!.push.key, {
          kind: 'fallback',
          reason: 'GraphQL refused it as too heavy',
        });
      } else {
        const half = Math.ceil(retry.length / 2);
        const parts = retry.length === 1 ? [retry] : [retry.slice(0, half), retry.slice(half)];
        for (const p of parts)
          next.push(...(await run(p.map((o) => ({ ...o, splits: o.splits + 1 })))));
      }
    }
    return next;
  }

  try {
    while (open.length > 0) {
      // Suspects of a batch that died are asked alone: a death then is theirs.
      const together = open.filter((o) => !o.push.alone);
      const batches = [
        ...planBatches(
          together.map((o) => ({ ...item(o), o })),
          opts.maxRequests,
        ).map((b) => b.map((x) => x.o)),
        ...open.filter((o) => o.push.alone).map((o) => [o]),
      ];
      const next: Open[] = [];
      for (const b of batches) next.push(...(await run(b)));
      open = next;
    }
  } catch (err) {
    out.stoppedBy = err;
    for (const p of pushes) {
      if (!out.verdicts.has(p.key))
        out.verdicts.set(p.key, {
          kind: 'unfinished',
          reason: (err as Error)?.message ?? String(err),
        });
    }
  }
  return out;
}
