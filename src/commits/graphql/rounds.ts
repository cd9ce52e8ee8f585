import {
  type AnswerError,
  type BatchItem,
  type BuiltQuery,
  buildQuery,
  type DefaultBranchAnswer,
  GRAPHQL_MAX_PUSHES_A_QUERY,
  itemRequests,
  planBatches,
  readItem,
} from './batch.ts';
import {
  type Ask,
  judge,
  newEvidence,
  PAGE_MAX,
  type ProofLimits,
  type PushEvidence,
  type Verdict,
} from './proof.ts';
import { CommitsPerPush, chooseFirstRound, type FirstRound } from './sizing.ts';

/**
 * Rounds of batched queries until every push has a verdict (ADR 0111). Each round asks,
 * for every push still open, what its proof needs next; the asks of many pushes go into
 * queries of at most `maxRequests` GitHub requests (149 round to 1 point). A part GitHub
 * refused as too heavy (RESOURCE_LIMITS_EXCEEDED) is split and asked again; what an answer
 * did hold is kept. A whole query that failed (a 5xx, a timeout, an answer over its cap, one
 * that is not JSON or is empty) is split in two and asked again only until the
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
   * a new branch whose default-branch tip at push time is unknown: the tip now (and its
   * newest ancestors) is read in the first round and used as the base (its result is then
   * never `complete` with 0). `default-around`: the same new branch against a tip of the
   * default branch the stored pushes show around it, proven like any base (the fetcher
   * keeps what none reaches). `new-ref`: a new ref of a repository whose default branch
   * this database does not know yet: the first round reads it, and the push is that
   * branch's first push (`ref` is it: the whole history) or else `default-now`.
   */
  baseFrom: 'before' | 'first-push' | 'default-tip' | 'default-now' | 'default-around' | 'new-ref';
  /** The pushed ref (refs/heads/…): what a `new-ref` push is compared with. */
  ref?: string;
  /** Asked in queries of its own: a batch query about it died once. */
  alone?: boolean;
}

/** The pushes whose first round reads the default branch. */
const READS_DEFAULT_BRANCH = new Set<RoundPush['baseFrom']>(['default-now', 'new-ref']);

/** The default branch's tip now as the base, with the page of its history read with it. */
function baseOnTip(ev: PushEvidence, tip: string, page: DefaultBranchAnswer['history']): void {
  ev.base = tip;
  ev.baseOids.add(tip);
  ev.baseOrder.push(tip);
  if (!page) return;
  for (const oid of page.oids) {
    if (!ev.baseOids.has(oid)) ev.baseOrder.push(oid);
    ev.baseOids.add(oid);
  }
  ev.baseTotal = page.total;
  ev.basePages = 1;
  ev.baseCursor = page.next;
  ev.baseComplete = page.next === null;
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
  /**
   * What the first round asks of every push (graphql-sizing.ts). Default: chosen for the
   * batch's size over GitHub's commits per push (not this process's learned mix).
   */
  firstRound?: FirstRound;
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
  /**
   * Asked before each round after the first while pushes are still open: more pushes to
   * prove alongside them (the fetcher's next due ones). They start with a first round of
   * their own in the same queries, so the rounds' part-empty last queries carry new work
   * instead of only the few pushes still being walked.
   */
  more?: () => Promise<readonly RoundPush[]>;
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

/** A round's query filled less than this waits for the next round's asks (see proveAll). */
const WAIT_BELOW = 0.9;

/** GitHub's commits per push, unlearned: the default first round's distribution. */
const GITHUB_MIX = new CommitsPerPush().entries();

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
  // The first round fills its queries (graphql-sizing.ts): few pushes are each read deep
  // (most proven in one round); many, each by its head and parents, the rest sized by the
  // counts in the rounds after.
  const first = opts.firstRound ?? chooseFirstRound(pushes.length, GITHUB_MIX, opts.maxRequests);
  const all = [...pushes];
  const opening = (push: RoundPush): Open => {
    const ev = newEvidence(push.head, push.base);
    out.evidence.set(push.key, ev);
    // A walk of 1 is the head alone, read without its history count (one request less).
    const asks: Ask[] = [
      first.walk === 1
        ? { kind: 'commit', of: push.head }
        : { kind: 'walk', from: push.head, first: first.walk },
    ];
    if (push.base && first.withBase)
      asks.push({ kind: 'base', first: opts.baseFirst ?? PAGE_MAX, after: null });
    const defaultBranch = READS_DEFAULT_BRANCH.has(push.baseFrom);
    return { push, ev, asks, defaultBranch, splits: 0 };
  };
  let open: Open[] = pushes.map(opening);

  const settle = (o: Open): Open | null => {
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
        const d = r.defaultBranch;
        if (d) out.defaultBranches.set(o.push.key, d.name);
        const firstPush = o.push.baseFrom === 'new-ref' && o.push.ref === `refs/heads/${d?.name}`;
        if (o.defaultBranch && o.ev.base === null && !firstPush) {
          // A new branch: the default branch's tip now is its base, its history read with it.
          if (!d?.tip) {
            out.verdicts.set(o.push.key, {
              kind: 'fallback',
              reason: 'the repository has no default branch tip',
            });
            return;
          }
          baseOnTip(o.ev, d.tip, d.history);
          if (!d.history) {
            next.push({
              ...o,
              asks: [{ kind: 'base', first: opts.baseFirst ?? PAGE_MAX, after: null }],
              defaultBranch: false,
            });
            return;
          }
        }
        // (A new ref that is the default branch: its first push, no base, its whole history.)
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
    for (let round = 0; open.length > 0; round++) {
      if (round > 0 && opts.more && !breakerOpen()) {
        for (const push of await opts.more()) {
          all.push(push);
          open.push(opening(push));
        }
      }
      // Suspects of a batch that died are asked alone: a death then is theirs.
      const together = open.filter((o) => !o.push.alone);
      const planned = planBatches(
        together.map((o) => ({ ...item(o), o })),
        opts.maxRequests,
      ).map((b) => b.map((x) => x.o));
      // A round's emptiest query, when others go out with it, waits for the next round:
      // its pushes' asks pack with what those answers ask next, so only the last round
      // sends a part-empty query (a point is a point however little it holds).
      const fill = planned.map((b) =>
        Math.max(
          b.reduce((n, o) => n + itemRequests(item(o)), 0) / opts.maxRequests,
          b.length / GRAPHQL_MAX_PUSHES_A_QUERY,
        ),
      );
      const emptiest = fill.indexOf(Math.min(...fill));
      const wait = planned.length > 1 && fill[emptiest]! < WAIT_BELOW;
      const next: Open[] = wait ? planned[emptiest]! : [];
      const batches = [
        ...planned.filter((_, i) => !(wait && i === emptiest)),
        ...open.filter((o) => o.push.alone).map((o) => [o]),
      ];
      for (const b of batches) next.push(...(await run(b)));
      open = next;
    }
  } catch (err) {
    out.stoppedBy = err;
    for (const p of all) {
      if (!out.verdicts.has(p.key))
        out.verdicts.set(p.key, {
          kind: 'unfinished',
          reason: (err as Error)?.message ?? String(err),
        });
    }
  }
  return out;
}
