import { type AnswerObject, answerObject, answerText, answerTime } from '../answer-values.ts';
import type { FetchedCommit } from '../compare.ts';
import { type Ask, askRequests, PAGE_MAX, type PushEvidence } from './proof.ts';

/**
 * One GraphQL query for many pushes across many repositories (ADR 0111): each push is an
 * alias `pN: repository(owner:, name:)`, each of its asks an alias `aN_M: object(oid:)`
 * under it, asking only for what the stored rows and the proof need. Pure: a document and
 * its variables out, evidence in (readAnswer). The cost is GitHub's formula: a `walk` of
 * `first` n costs 1 + n requests (its history, and the parents of each commit), a `base`
 * page or a `count` 1; the query costs round(requests / 100) points, at least 1.
 */

/** Parents asked for a commit: more (an octopus of 9) makes it unwalkable, said so. */
export const PARENTS_FIRST = 8;
export const MESSAGE_MAX = 65_536;
const NAME_MAX = 1_000;
const OID = /^[0-9a-f]{40}$/;

export interface BatchItem {
  /** owner/name as stored (GitHub follows a rename). */
  fullName: string;
  repositoryId: string;
  asks: readonly Ask[];
  /**
   * Ask for the default branch's name, tip and the first page of the tip's history (a new
   * ref: its base when it is a new branch; whether it is the first push of that branch).
   */
  defaultBranch?: boolean;
}

export interface BuiltQuery {
  query: string;
  variables: Record<string, unknown>;
  /** GitHub's requests (Σ connections × the `first` around them). */
  requests: number;
  /** The points GitHub will charge: max(1, round(requests / 100)). */
  points: number;
}

export const COMMIT_FRAGMENT = `fragment PushCommit on Commit {
  oid
  message
  author { name email date user { databaseId login } }
  committer { name email date user { databaseId login } }
  parents(first: ${PARENTS_FIRST}) { totalCount nodes { oid } }
}`;

export function pointsFor(requests: number): number {
  return Math.max(1, Math.round(requests / 100));
}

export function itemRequests(item: BatchItem): number {
  return item.asks.reduce((n, a) => n + askRequests(a), item.defaultBranch ? 1 : 0);
}

/** The default branch's name, its tip and its tip's newest ancestors (oids: 1 request). */
const DEFAULT_BRANCH_FIELD = ` defaultBranchRef { name target { oid ... on Commit { history(first: ${PAGE_MAX}) { totalCount pageInfo { hasNextPage endCursor } nodes { oid } } } } }`;

function askField(alias: string, a: Ask, vars: string[], values: Record<string, unknown>): string {
  const x = `${alias}x`;
  vars.push(`$${x}: GitObjectID!`);
  if (a.kind === 'walk') {
    values[x] = a.from;
    return `${alias}: object(oid: $${x}) { ... on Commit { history(first: ${a.first}) { totalCount nodes { ...PushCommit } } } }`;
  }
  if (a.kind === 'commit') {
    values[x] = a.of;
    return `${alias}: object(oid: $${x}) { ...PushCommit }`;
  }
  if (a.kind === 'count') {
    values[x] = a.of;
    const first = a.first ?? 1;
    return `${alias}: object(oid: $${x}) { ... on Commit { history(first: ${first}) { totalCount${first > 1 ? ' nodes { oid }' : ''} } } }`;
  }
  const c = `${alias}c`;
  vars.push(`$${c}: String`);
  values[x] = '';
  values[c] = a.after;
  return `${alias}: object(oid: $${x}) { ... on Commit { history(first: ${a.first}, after: $${c}) { totalCount pageInfo { hasNextPage endCursor } nodes { oid } } } }`;
}

/** The base ask needs the base's oid, which the builder takes from the evidence. */
export function buildQuery(
  items: readonly BatchItem[],
  bases: readonly (string | null)[],
): BuiltQuery {
  const vars: string[] = [];
  const values: Record<string, unknown> = {};
  const fields: string[] = [];
  let requests = 0;
  let walks = false;
  items.forEach((item, i) => {
    const [owner, name] = item.fullName.split('/') as [string, string];
    vars.push(`$o${i}: String!`, `$n${i}: String!`);
    values[`o${i}`] = owner;
    values[`n${i}`] = name;
    const inner = item.asks.map((a, j) => {
      const alias = `a${i}_${j}`;
      const f = askField(alias, a, vars, values);
      if (a.kind === 'base') values[`${alias}x`] = bases[i];
      if (a.kind === 'walk' || a.kind === 'commit') walks = true;
      return f;
    });
    const branch = item.defaultBranch ? DEFAULT_BRANCH_FIELD : '';
    fields.push(
      `p${i}: repository(owner: $o${i}, name: $n${i}) { databaseId${branch} ${inner.join(' ')} }`,
    );
    requests += itemRequests(item);
  });
  const query = `query PushCommits(${vars.join(', ')}) {
  rateLimit { cost remaining resetAt }
  ${fields.join('\n  ')}
}${walks ? `\n${COMMIT_FRAGMENT}` : ''}`;
  return { query, variables: values, requests, points: pointsFor(requests) };
}

/** Pushes (repository aliases) one query holds at most, however few requests they ask. */
export const GRAPHQL_MAX_PUSHES_A_QUERY = 100;

/**
 * Splits items into batches of at most `maxRequests` GitHub requests each (an item is
 * never split: its asks answer one round of its proof). 149 requests round to 1 point, so
 * the batches are packed first-fit, the largest items first: a round's long walks do not
 * each leave a part-empty query behind them, and only the round's last query is part empty.
 * An item larger than the bound is a query of its own.
 */
export function planBatches<T extends BatchItem>(
  items: readonly T[],
  maxRequests: number,
  maxItems = GRAPHQL_MAX_PUSHES_A_QUERY,
): T[][] {
  const sized = items.map((item, i) => ({ item, i, r: itemRequests(item) }));
  sized.sort((a, b) => b.r - a.r || a.i - b.i);
  const bins: { items: T[]; n: number }[] = [];
  for (const { item, r } of sized) {
    const bin = bins.find((b) => b.n + r <= maxRequests && b.items.length < maxItems);
    if (bin) {
      bin.items.push(item);
      bin.n += r;
    } else bins.push({ items: [item], n: r });
  }
  return bins.map((b) => b.items);
}

export class GraphQLAnswerInvalid extends Error {
  readonly code = 'GRAPHQL_ANSWER_INVALID';
  constructor(problem: string) {
    super(`GraphQL answer is not usable: ${problem}`);
  }
}

type Obj = AnswerObject;
const obj = answerObject;
const text = answerText;
const time = answerTime;

function count(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)
    throw new GraphQLAnswerInvalid(`${what}: no count`);
  return v;
}

function oidOf(v: unknown, what: string): string {
  const s = obj(v)?.oid;
  if (typeof s !== 'string' || !OID.test(s)) throw new GraphQLAnswerInvalid(`${what}: no oid`);
  return s;
}

function person(v: unknown) {
  const o = obj(v) ?? {};
  const u = obj(o.user);
  const id =
    u && typeof u.databaseId === 'number' && Number.isSafeInteger(u.databaseId) && u.databaseId > 0
      ? String(u.databaseId)
      : null;
  return {
    name: text(o.name, NAME_MAX),
    email: text(o.email, NAME_MAX),
    date: time(o.date),
    id,
    login: id ? text(u!.login, NAME_MAX) : null,
  };
}

function commitOf(
  v: unknown,
  what: string,
): { commit: FetchedCommit; parents: string[]; cut: boolean } {
  const o = obj(v);
  if (!o) throw new GraphQLAnswerInvalid(`${what}: not an object`);
  const sha = oidOf(o, what);
  const ps = obj(o.parents);
  if (!ps || !Array.isArray(ps.nodes)) throw new GraphQLAnswerInvalid(`${what}: no parents`);
  const total = count(ps.totalCount, `${what}.parents`);
  if (ps.nodes.length > PARENTS_FIRST)
    throw new GraphQLAnswerInvalid(`${what}: more parents than asked for`);
  const parents = ps.nodes.map((p, k) => oidOf(p, `${what}.parents[${k}]`));
  if (new Set(parents).size !== parents.length || parents.includes(sha))
    throw new GraphQLAnswerInvalid(`${what}: repeated parents`);
  const a = person(o.author);
  const c = person(o.committer);
  return {
    commit: {
      sha,
      authorName: a.name,
      authorEmail: a.email,
      authoredAt: a.date,
      authorId: a.id,
      authorLogin: a.login,
      committerName: c.name,
      committerEmail: c.email,
      committedAt: c.date,
      committerId: c.id,
      committerLogin: c.login,
      message: text(o.message, MESSAGE_MAX),
      parents,
    },
    parents,
    cut: total > parents.length,
  };
}

function history(
  v: unknown,
  what: string,
  first: number,
): { total: number; nodes: unknown[]; page: Obj | null } {
  const h = obj(obj(v)?.history);
  if (!h) throw new GraphQLAnswerInvalid(`${what}: no history`);
  const total = count(h.totalCount, what);
  const nodes = h.nodes === undefined ? [] : h.nodes;
  if (!Array.isArray(nodes)) throw new GraphQLAnswerInvalid(`${what}: nodes is not a list`);
  if (nodes.length > first || nodes.length > total)
    throw new GraphQLAnswerInvalid(
      `${what}: ${nodes.length} nodes where at most ${Math.min(first, total)} fit`,
    );
  return { total, nodes, page: obj(h.pageInfo) };
}

/** The default branch as an answer gave it: its tip's history a page of base oids. */
export interface DefaultBranchAnswer {
  name: string;
  tip: string | null;
  /** The first page of the tip's history (the tip first), its count and the next cursor. */
  history: { total: number; oids: string[]; next: string | null } | null;
}

export type ItemAnswer =
  | { kind: 'ok'; defaultBranch: DefaultBranchAnswer | null }
  /** NOT_FOUND: the repository is gone (or private to us). */
  | { kind: 'gone' }
  /** RESOURCE_LIMITS_EXCEEDED, a timeout of the part: ask again in a smaller batch. */
  | { kind: 'unanswered'; why: string }
  | { kind: 'invalid'; why: string };

export interface AnswerError {
  type?: string;
  message: string;
  path?: readonly (string | number)[];
}

/**
 * One item's part of an answer into its evidence (mutated), round counted. A part that
 * is inconsistent with itself (a repeated oid, more nodes than asked, a count that is not
 * one) or with the push (another repository's id) is invalid: nothing of it is kept.
 */
export function readItem(
  data: Obj | null,
  errors: readonly AnswerError[],
  i: number,
  item: BatchItem,
  ev: PushEvidence,
): ItemAnswer {
  const mine = errors.filter((e) => e.path?.[0] === `p${i}`);
  if (mine.some((e) => e.type === 'NOT_FOUND' && e.path?.length === 1)) return { kind: 'gone' };
  if (mine.length > 0) {
    const e = mine[0]!;
    return e.type === 'RESOURCE_LIMITS_EXCEEDED' || e.type === undefined
      ? { kind: 'unanswered', why: e.type ?? e.message.slice(0, 200) }
      : { kind: 'invalid', why: `${e.type}: ${e.message.slice(0, 200)}` };
  }
  const repo = obj(data?.[`p${i}`]);
  if (!repo) return { kind: 'unanswered', why: 'no data for the repository' };
  if (String(repo.databaseId) !== item.repositoryId) {
    return {
      kind: 'invalid',
      why: `${item.fullName} is repository ${String(repo.databaseId)} now, not ${item.repositoryId}`,
    };
  }
  const staged = new Map<string, { commit: FetchedCommit; parents: string[] }>();
  const cut = new Set<string>();
  const counts = new Map<string, number>();
  const ancestors = new Map<string, Set<string>>();
  let headTotal = ev.headTotal;
  let headMissing = false;
  let baseMissing = false;
  const basePage: { oids: string[]; total: number; next: string | null } = {
    oids: [],
    total: -1,
    next: null,
  };
  let defaultBranch: DefaultBranchAnswer | null = null;
  try {
    if (item.defaultBranch) defaultBranch = defaultBranchOf(repo.defaultBranchRef, `p${i}`);
    item.asks.forEach((a, j) => {
      const what = `p${i}.a${i}_${j}`;
      const target = repo[`a${i}_${j}`];
      const from =
        a.kind === 'walk' ? a.from : a.kind === 'count' || a.kind === 'commit' ? a.of : ev.base!;
      if (target === null || target === undefined) {
        if (from === ev.head) headMissing = true;
        else if (from === ev.base) baseMissing = true;
        else
          throw new GraphQLAnswerInvalid(`${what}: ${from}, a parent GitHub named, does not exist`);
        return;
      }
      if (a.kind === 'commit') {
        const c = commitOf(target, what);
        if (c.commit.sha !== a.of)
          throw new GraphQLAnswerInvalid(`${what}: ${c.commit.sha}, not ${a.of}`);
        if (c.cut) cut.add(c.commit.sha);
        else staged.set(c.commit.sha, c);
        return;
      }
      if (a.kind === 'count') {
        const h = history(target, what, a.first ?? 1);
        counts.set(a.of, h.total);
        if (a.of === ev.head) headTotal = h.total;
        if (h.nodes.length > 0) {
          const oids = h.nodes.map((n, k) => oidOf(n, `${what}[${k}]`));
          if (oids[0] !== a.of || new Set(oids).size !== oids.length) {
            throw new GraphQLAnswerInvalid(`${what}: not the history of ${a.of}`);
          }
          ancestors.set(a.of, new Set(oids));
        }
        return;
      }
      if (a.kind === 'walk') {
        const h = history(target, what, a.first);
        counts.set(a.from, h.total);
        if (a.from === ev.head) headTotal = h.total;
        const seen = new Set<string>();
        h.nodes.forEach((n, k) => {
          const c = commitOf(n, `${what}[${k}]`);
          if (seen.has(c.commit.sha))
            throw new GraphQLAnswerInvalid(`${what}: ${c.commit.sha} twice`);
          if (k === 0 && c.commit.sha !== a.from)
            throw new GraphQLAnswerInvalid(
              `${what}: history of ${a.from} starts at ${c.commit.sha}`,
            );
          seen.add(c.commit.sha);
          if (c.cut) cut.add(c.commit.sha);
          else staged.set(c.commit.sha, c);
        });
        return;
      }
      const h = history(target, what, a.first);
      basePage.total = h.total;
      const seen = new Set<string>();
      for (const [k, n] of h.nodes.entries()) {
        const oid = oidOf(n, `${what}[${k}]`);
        if (
          seen.has(oid) ||
          (ev.baseOids.has(oid) && !(a.after === null && k === 0 && oid === ev.base))
        ) {
          throw new GraphQLAnswerInvalid(`${what}: ${oid} twice`);
        }
        if (a.after === null && k === 0 && oid !== ev.base)
          throw new GraphQLAnswerInvalid(`${what}: history of the base starts at ${oid}`);
        seen.add(oid);
        basePage.oids.push(oid);
      }
      const more = h.page?.hasNextPage === true;
      const end = h.page?.endCursor;
      basePage.next = more && typeof end === 'string' && end.length <= 200 ? end : null;
      if (more && basePage.next === null)
        throw new GraphQLAnswerInvalid(`${what}: a next page without a cursor`);
    });
  } catch (err) {
    if (err instanceof GraphQLAnswerInvalid) return { kind: 'invalid', why: err.message };
    throw err;
  }
  // Consistent: keep it.
  ev.rounds += 1;
  ev.headMissing ||= headMissing;
  ev.baseMissing ||= baseMissing;
  ev.headTotal = headTotal;
  for (const [k, v] of staged) ev.nodes.set(k, v);
  for (const k of cut) ev.cut.add(k);
  for (const [k, v] of counts) ev.counts.set(k, v);
  for (const [k, v] of ancestors) ev.ancestors.set(k, v);
  if (ev.base && counts.has(ev.base)) ev.baseTotal = counts.get(ev.base)!;
  if (basePage.total >= 0) {
    ev.baseTotal = basePage.total;
    ev.basePages += 1;
    for (const oid of basePage.oids) {
      if (!ev.baseOids.has(oid)) ev.baseOrder.push(oid);
      ev.baseOids.add(oid);
    }
    ev.baseCursor = basePage.next;
    ev.baseComplete = basePage.next === null;
    if (ev.baseComplete && ev.baseOids.size !== ev.baseTotal) {
      return {
        kind: 'invalid',
        why: `the base's history counts ${ev.baseTotal}, lists ${ev.baseOids.size}`,
      };
    }
  }
  return { kind: 'ok', defaultBranch };
}

/**
 * `defaultBranchRef` as asked (DEFAULT_BRANCH_FIELD): null when the repository has none (or
 * the name is not one); a history that is not the tip's (another first oid, an oid twice,
 * more than asked, a count it contradicts) makes the part invalid.
 */
function defaultBranchOf(v: unknown, what: string): DefaultBranchAnswer | null {
  const d = obj(v);
  if (!d || typeof d.name !== 'string' || d.name.length === 0 || d.name.length > 255) return null;
  const target = obj(d.target);
  const tip = typeof target?.oid === 'string' && OID.test(target.oid) ? target.oid : null;
  if (!tip || !target || target.history === undefined) return { name: d.name, tip, history: null };
  const h = history(target, `${what}.defaultBranchRef`, PAGE_MAX);
  const oids = h.nodes.map((n, k) => oidOf(n, `${what}.defaultBranchRef[${k}]`));
  if (oids.length === 0 || oids[0] !== tip || new Set(oids).size !== oids.length)
    throw new GraphQLAnswerInvalid(`${what}.defaultBranchRef: not the history of its tip`);
  const more = h.page?.hasNextPage === true;
  const end = h.page?.endCursor;
  const next = more && typeof end === 'string' && end.length <= 200 ? end : null;
  if (more && next === null)
    throw new GraphQLAnswerInvalid(`${what}.defaultBranchRef: a next page without a cursor`);
  if (!more && oids.length !== h.total)
    throw new GraphQLAnswerInvalid(
      `${what}.defaultBranchRef: its history counts ${h.total}, lists ${oids.length}`,
    );
  return { name: d.name, tip, history: { total: h.total, oids, next } };
}
