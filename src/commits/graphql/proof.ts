import type { FetchedCommit } from '../compare.ts';

/**
 * Proving a push's commits from GraphQL answers (ADR 0111). Pure: evidence in, a verdict
 * out. A push's commits are anc(head) \ anc(base) — reachable from its head and not from
 * its base — oldest first, parents before children; a first push (no base) is all of
 * anc(head). GitHub's history walk is ordered by committer date, which proves nothing
 * (clocks skew, merges interleave), so the proof uses only what does:
 *
 * - parent edges of the commits fetched (`parents`, every one of them: a list cut short
 *   makes the commit unwalkable);
 * - `history.totalCount` = |anc(x)|, for the head, the base and a fork point;
 * - membership: every oid of the base's history is an ancestor of the base.
 *
 * The walk W goes from the head along parent edges and stops at the base's known
 * ancestors (the stops T); Z is what it reached but has not fetched. When Z is empty,
 * anc(head) = W ∪ anc(T), so every commit of the push is in W; then:
 *
 * - fast-forward (the base is in T, so base ∈ anc(head)): |push| = |anc(head)| − |anc(base)|,
 *   and |W| equal to that proves W is the push, exactly (W ⊇ push, same size);
 * - force push (the base not in T: base ∉ anc(head)), one stop M: |anc(head)| = |W| + |anc(M)|
 *   proves W ∩ anc(M) = ∅; the base's own walk L down to M (closed) gives anc(base) =
 *   L ∪ anc(M), so the push is W \ L, exactly;
 * - first push: |W| = |anc(head)| proves W is all of it.
 *
 * Anything else asks for more (the next round) or gives up to REST compare; a count that
 * contradicts the edges is `invalid` (the answer lies: the retry ladder).
 */

export interface ProofNode {
  commit: FetchedCommit;
  /** Every parent (a commit whose parents GitHub listed only in part is never a node). */
  parents: readonly string[];
}

export interface PushEvidence {
  head: string;
  /** The base commit (the push's before, or the default branch's tip); null: a first push. */
  base: string | null;
  nodes: Map<string, ProofNode>;
  /** Commits whose parent list was cut (more than the query's `parents(first:)`). */
  cut: Set<string>;
  headTotal: number | null;
  /** object(oid: head) answered null: GitHub does not have it. */
  headMissing: boolean;
  baseMissing: boolean;
  baseTotal: number | null;
  /** A prefix of the base's history: each one an ancestor of the base (the base included). */
  baseOids: Set<string>;
  /** Insertion order of baseOids (GitHub's history order), for sizing the base's own walk. */
  baseOrder: string[];
  /** baseOids holds all of anc(base). */
  baseComplete: boolean;
  baseCursor: string | null;
  basePages: number;
  /** |anc(x)| for commits other than head and base (a force push's fork point). */
  counts: Map<string, number>;
  /** A prefix of the history of a commit other than the base (a fork point's ancestors). */
  ancestors: Map<string, Set<string>>;
  rounds: number;
}

export type Ask =
  /** history(first) from a commit, with every field a stored row needs and its parents. */
  | { kind: 'walk'; from: string; first: number }
  /**
   * The commit itself, with every field a row needs and its parents, but no history count:
   * one request (a walk of 1 is two). A one-commit push on top of its base needs no more.
   */
  | { kind: 'commit'; of: string }
  /** The next page of the base's history: oids only (one request whatever its size). */
  | { kind: 'base'; first: number; after: string | null }
  /** |anc(of)|, and with `first` > 1 the oids of its newest ancestors (one request either way). */
  | { kind: 'count'; of: string; first?: number };

export type Verdict =
  | {
      kind: 'proven';
      /** Oldest first, parents before children. */
      commits: FetchedCommit[];
      /** The push's true number of commits. */
      total: number;
      /** Position of commits[0] (0 = the push's oldest): total − commits.length when cut. */
      firstPosition: number;
      /** `behind`: the head is an ancestor of the base (identical or behind): no commits. */
      how: 'linear' | 'fast-forward' | 'force-push' | 'first-push' | 'behind';
    }
  | { kind: 'more'; asks: Ask[] }
  | { kind: 'fallback'; reason: string }
  | { kind: 'invalid'; reason: string }
  | { kind: 'gone'; reason: string };

export interface ProofLimits {
  /** COMMITS_MAX_PER_PUSH. */
  cap: number;
  /** Rounds before giving the push to REST compare. */
  maxRounds: number;
  /** Pages of the base's history (100 oids each) before giving up. */
  maxBasePages: number;
  /** Unfetched commits one round may expand from. */
  maxFrontier: number;
}

export const DEFAULT_PROOF_LIMITS: Omit<ProofLimits, 'cap'> = {
  maxRounds: 7,
  maxBasePages: 4,
  maxFrontier: 4,
};

/** `first` on every connection: GitHub's limit. */
export const PAGE_MAX = 100;

export function newEvidence(head: string, base: string | null): PushEvidence {
  return {
    head,
    base,
    nodes: new Map(),
    cut: new Set(),
    headTotal: null,
    headMissing: false,
    baseMissing: false,
    baseTotal: null,
    baseOids: new Set(base ? [base] : []),
    baseOrder: base ? [base] : [],
    baseComplete: false,
    baseCursor: null,
    basePages: 0,
    counts: new Map(),
    ancestors: new Map(),
    rounds: 0,
  };
}

/**
 * Without any count: the walk is closed, stops only at the base, and every commit in it
 * has the base as an ancestor through the fetched edges. Then anc(head) = W ∪ anc(base),
 * and no commit of W is in anc(base) (it would be its own ancestor): W is the push.
 */
function linearProof(ev: PushEvidence, w: Walk): boolean {
  if (!ev.base || w.boundary.size > 0 || w.stops.size !== 1 || !w.stops.has(ev.base)) return false;
  const reaches = new Map<string, boolean>();
  const order = topologicalOrder(ev, w.members);
  if (order.length !== w.members.length) return false;
  for (const x of order) {
    reaches.set(
      x,
      ev.nodes.get(x)!.parents.some((p) => p === ev.base || reaches.get(p) === true),
    );
  }
  return w.members.length > 0 && w.members.every((x) => reaches.get(x) === true);
}

/** Requests an ask costs in GitHub's formula (connections × the `first` around them). */
export function askRequests(a: Ask): number {
  return a.kind === 'walk' ? 1 + a.first : 1;
  // (`commit`: its parents are the one connection; `base` and `count`: the history's.)
}

interface Walk {
  /** Discovery order. */
  members: string[];
  inWalk: Set<string>;
  boundary: Set<string>;
  stops: Set<string>;
  cut: string | null;
}

function walkFrom(ev: PushEvidence, start: string, stops: ReadonlySet<string>): Walk {
  const w: Walk = {
    members: [],
    inWalk: new Set(),
    boundary: new Set(),
    stops: new Set(),
    cut: null,
  };
  const stack = [start];
  const seen = new Set<string>();
  while (stack.length > 0) {
    const x = stack.pop()!;
    if (seen.has(x)) continue;
    seen.add(x);
    if (stops.has(x)) {
      w.stops.add(x);
      continue;
    }
    if (ev.cut.has(x)) {
      w.cut = x;
      continue;
    }
    const node = ev.nodes.get(x);
    if (!node) {
      w.boundary.add(x);
      continue;
    }
    w.members.push(x);
    w.inWalk.add(x);
    for (const p of node.parents) stack.push(p);
  }
  return w;
}

/**
 * Parents before children, oldest first (Kahn's algorithm over the set's own edges; ties
 * by GitHub's order reversed, so a linear push reads as git log reversed).
 */
export function topologicalOrder(ev: PushEvidence, set: readonly string[]): string[] {
  const inSet = new Set(set);
  const pending = new Map<string, number>();
  const children = new Map<string, string[]>();
  for (const x of set) {
    const ps = ev.nodes.get(x)!.parents.filter((p) => inSet.has(p));
    pending.set(x, new Set(ps).size);
    for (const p of new Set(ps)) {
      const list = children.get(p) ?? [];
      list.push(x);
      children.set(p, list);
    }
  }
  // Discovery order runs head first; reversed, the oldest come first among equals.
  const ready = [...set].reverse().filter((x) => pending.get(x) === 0);
  const out: string[] = [];
  while (ready.length > 0) {
    const x = ready.shift()!;
    out.push(x);
    for (const c of children.get(x) ?? []) {
      const n = pending.get(c)! - 1;
      pending.set(c, n);
      if (n === 0) ready.push(c);
    }
  }
  return out;
}

function proven(
  ev: PushEvidence,
  members: readonly string[],
  total: number,
  cap: number,
  how: Extract<Verdict, { kind: 'proven' }>['how'],
): Verdict {
  const ordered = topologicalOrder(ev, members);
  if (ordered.length !== members.length)
    return { kind: 'invalid', reason: 'the parent edges hold a cycle' };
  // Past the cap the newest are kept (as REST compare keeps them), at their true positions.
  const kept = ordered.slice(Math.max(0, ordered.length - cap));
  return {
    kind: 'proven',
    commits: kept.map((x) => ev.nodes.get(x)!.commit),
    total,
    firstPosition: total - kept.length,
    how,
  };
}

const clamp = (n: number, lo: number, hi: number) => Math.max(lo, Math.min(hi, n));

function frontierAsks(
  boundary: ReadonlySet<string>,
  want: number,
  limits: ProofLimits,
): Ask[] | null {
  if (boundary.size > limits.maxFrontier) return null;
  const first = clamp(Math.ceil(want / boundary.size), 1, PAGE_MAX);
  return [...boundary].map((from) => ({ kind: 'walk', from, first }));
}

function baseAsk(ev: PushEvidence, limits: ProofLimits): Ask | null {
  if (!ev.base || ev.baseComplete || ev.basePages >= limits.maxBasePages) return null;
  return { kind: 'base', first: PAGE_MAX, after: ev.baseCursor };
}

function more(
  ev: PushEvidence,
  limits: ProofLimits,
  asks: (Ask | null)[] | null,
  why: string,
): Verdict {
  const list = (asks ?? []).filter((a): a is Ask => a !== null);
  if (asks === null || list.length === 0) return { kind: 'fallback', reason: why };
  if (ev.rounds >= limits.maxRounds)
    return { kind: 'fallback', reason: `${why} after ${ev.rounds} rounds` };
  return { kind: 'more', asks: list };
}

/** The verdict on one push's evidence so far. */
export function judge(ev: PushEvidence, limits: ProofLimits): Verdict {
  if (ev.headMissing) return { kind: 'gone', reason: `GitHub has no commit ${ev.head}` };
  if (ev.base && ev.baseMissing)
    return { kind: 'fallback', reason: `GitHub has no commit ${ev.base} (the base)` };
  if (ev.headTotal === null) {
    // The head read without its history count (the cheapest first round). A walk closed
    // without one proves the push by the edges alone: down to the base only (linear), or,
    // with no base, to the roots (every ancestor fetched: the whole history). Else count it.
    const w0 = walkFrom(ev, ev.head, ev.baseOids);
    if (!w0.cut && ev.base && linearProof(ev, w0))
      return proven(ev, w0.members, w0.members.length, limits.cap, 'linear');
    if (!w0.cut && !ev.base && w0.boundary.size === 0 && w0.members.length > 0)
      return proven(ev, w0.members, w0.members.length, limits.cap, 'first-push');
    const counts: (Ask | null)[] = [{ kind: 'count', of: ev.head }];
    if (ev.base && ev.baseTotal === null) counts.push(baseAsk(ev, limits));
    return more(ev, limits, counts, 'the head not yet counted');
  }
  const tH = ev.headTotal;
  if (ev.base && ev.baseTotal === null) {
    const w0 = walkFrom(ev, ev.head, ev.baseOids);
    if (!w0.cut && linearProof(ev, w0)) {
      return proven(ev, w0.members, w0.members.length, limits.cap, 'linear');
    }
    return more(ev, limits, [baseAsk(ev, limits)], 'the base not yet counted');
  }
  if (ev.base && ev.baseOids.has(ev.head)) {
    // The base's own history lists the head: anc(head) ⊆ anc(base), nothing is new.
    return { kind: 'proven', commits: [], total: 0, firstPosition: 0, how: 'behind' };
  }
  const w = walkFrom(ev, ev.head, ev.baseOids);
  if (w.cut)
    return { kind: 'fallback', reason: `commit ${w.cut} has more parents than were asked for` };

  if (!ev.base) {
    // A first push: its whole history, up to the cap.
    if (w.boundary.size === 0) {
      if (w.members.length !== tH) {
        return {
          kind: 'invalid',
          reason: `history counts ${tH} commits, the edges reach ${w.members.length}`,
        };
      }
      return proven(ev, w.members, tH, limits.cap, 'first-push');
    }
    if (w.members.length >= limits.cap) {
      // Every commit reached is the push's; the newest cap of them (closed under children
      // within what was fetched) are stored, with the true count.
      return proven(ev, newestClosed(ev, w, limits.cap), tH, limits.cap, 'first-push');
    }
    return more(
      ev,
      limits,
      frontierAsks(w.boundary, Math.min(tH, limits.cap) - w.members.length, limits),
      'a first push not walked to its root',
    );
  }

  const tB = ev.baseTotal!;
  const ff = w.stops.has(ev.base);
  if (w.boundary.size > 0) {
    const expected = tH - tB;
    if (expected > limits.cap)
      return { kind: 'fallback', reason: `over the cap (${expected} by the counts)` };
    const remaining = expected - w.members.length;
    // |anc(head)| − |anc(base)| is at most the push's size whatever its kind, so `remaining`
    // is at least what is left to walk; the rounds left read at most a page a branch each.
    // When that cannot be enough, REST compare now, not after the rounds are spent.
    const readable =
      Math.max(0, limits.maxRounds - ev.rounds) *
      PAGE_MAX *
      Math.min(w.boundary.size, limits.maxFrontier);
    if (remaining > readable) {
      return {
        kind: 'fallback',
        reason: `${remaining} commits left by the counts, more than ${limits.maxRounds - ev.rounds} rounds read`,
      };
    }
    if (ff && remaining <= 0) {
      // The walk is as large as the push: what is left unfetched is the base's ancestry.
      return more(
        ev,
        limits,
        [baseAsk(ev, limits)],
        'a side branch forked below the base history fetched',
      );
    }
    // Not known to be a fast-forward: the counts do not size what is left (a force push's
    // rewritten commits), so each round reads further than the last.
    const want = ff || remaining > 0 ? remaining : 2 ** (ev.rounds + 1);
    const frontier = frontierAsks(w.boundary, Math.max(1, want), limits);
    if (frontier === null)
      return { kind: 'fallback', reason: `${w.boundary.size} branches to follow` };
    return more(ev, limits, frontier, 'not walked down to the base');
  }

  if (ff) {
    const expected = tH - tB;
    if (w.members.length === expected) {
      const how = w.members.every((x) => ev.nodes.get(x)!.parents.length === 1)
        ? 'linear'
        : 'fast-forward';
      return proven(ev, w.members, expected, limits.cap, how);
    }
    if (w.members.length < expected) {
      return {
        kind: 'invalid',
        reason: `the counts say ${expected} commits, the edges reach ${w.members.length}`,
      };
    }
    if (ev.baseComplete) {
      return {
        kind: 'invalid',
        reason: `the counts say ${expected} commits, the walk holds ${w.members.length}`,
      };
    }
    return more(ev, limits, [baseAsk(ev, limits)], 'commits of the base reached by another path');
  }

  // Not a fast-forward: the base is not an ancestor of the head (a force push).
  if (w.stops.size === 0) {
    if (w.members.length !== tH)
      return {
        kind: 'invalid',
        reason: `history counts ${tH}, the edges reach ${w.members.length}`,
      };
    if (ev.baseComplete) return proven(ev, w.members, w.members.length, limits.cap, 'force-push');
    return { kind: 'fallback', reason: 'unrelated histories' };
  }
  if (w.stops.size > 1) return { kind: 'fallback', reason: `${w.stops.size} fork points` };
  const fork = [...w.stops][0]!;
  const asks: Ask[] = [];
  const tM = ev.counts.get(fork);
  if (tM === undefined) asks.push({ kind: 'count', of: fork, first: PAGE_MAX });
  // The base's own walk down to the fork point and its known ancestors: anc(base) = L ∪ anc(fork).
  const l = walkFrom(ev, ev.base, new Set([fork, ...(ev.ancestors.get(fork) ?? [])]));
  if (l.cut)
    return { kind: 'fallback', reason: `commit ${l.cut} has more parents than were asked for` };
  if (l.boundary.size > 0) {
    const depth = ev.baseOrder.indexOf(fork);
    const want = depth > 0 ? depth - l.members.length : 1;
    const frontier = frontierAsks(l.boundary, Math.max(1, want), limits);
    if (frontier === null)
      return { kind: 'fallback', reason: `${l.boundary.size} branches below the base` };
    asks.push(...frontier);
  }
  if (asks.length > 0)
    return more(ev, limits, asks, 'a force push: the fork point not yet measured');
  if (tH > w.members.length + tM!)
    return {
      kind: 'invalid',
      reason: `history counts ${tH}, the walk and the fork point ${w.members.length + tM!}`,
    };
  if (tH < w.members.length + tM!)
    return {
      kind: 'fallback',
      reason: 'a force push whose new commits reach below the fork point',
    };
  const push = w.members.filter((x) => !l.inWalk.has(x));
  return proven(ev, push, push.length, limits.cap, 'force-push');
}

/** The newest `n` of a walk, closed under children within what was fetched. */
function newestClosed(ev: PushEvidence, w: Walk, n: number): string[] {
  const order = topologicalOrder(ev, w.members);
  return order.slice(Math.max(0, order.length - n));
}

export type Outcome = 'proven' | 'more' | 'fallback' | 'invalid' | 'gone';
