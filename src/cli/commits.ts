import { type App, createApp } from '../app.ts';
import {
  emptyFetchOutcomes,
  type FetchOutcome,
  type FetchResult,
  fetchOnce,
} from '../commits/fetch.ts';
import { fetchGraphQLBatch, graphqlStepMax } from '../commits/graphql-fetch.ts';
import { graphqlPointsLeft } from '../commits/graphql-sizing.ts';
import { UsageError } from '../errors.ts';
import { type CycleStop, oneEntityReport, runFetchCycle } from '../fetching/cycle.ts';
import { fetchLanes } from '../fetching/lanes.ts';
import type { BudgetSnapshot } from '../github/types.ts';
import { jsonInteger, type RawJson } from '../json/exact.ts';
import { bar, terminal } from '../terminal.ts';
import { parseCli, positiveIntFlag } from './args.ts';

const USAGE = `
Usage: bin/commits --limit N [--json]

Fetches the commits of up to N due pending pushes now, the repositories served in turn so
that one busy repository cannot hold up the others, by the same transport as the worker:
with COMMITS_TRANSPORT=graphql (the default) and a credential configured, batches of many
pushes in one GraphQL query on the credential's GraphQL points window (a push GraphQL
cannot prove goes to REST compare); otherwise GitHub's compare endpoint, one request a
push (a few for one paged past 250 commits). Runs beside a live worker: pushes are claimed
under a lease, so no two processes fetch the same one, and REST requests spend the
background allowance shared with enrichment (at most COMMITS_SHARE of it).

  --limit N    at most N pushes (required, a positive integer)
  --json       print one JSON summary instead of progress

Prints one line per push and a summary (stdout): fetched, complete, partial, gone, failed
and requests (and GraphQL queries and points), then the background budget left (REST) and,
by GraphQL, the points its windows have left; on a terminal, a progress bar under them
(stderr).
Exit codes: 0 stopped normally (limit reached, nothing due, budget or rate limit);
1 an error; 2 bad arguments or configuration.
`;

export type StopReason = 'limit' | 'nothing_due' | 'budget' | 'rate_limited' | 'interrupted';

type Counted = Exclude<FetchOutcome, 'idle' | 'budget_exhausted'>;

export interface CommitsRunSummary {
  limit: number;
  /** How this run fetched: GraphQL batches (REST for what they cannot prove) or REST compare. */
  transport: 'graphql' | 'rest';
  /** Pushes worked on (whatever their outcome). */
  fetched: number;
  /** REST requests sent. */
  requests: number;
  /** GraphQL queries sent and the points they cost (0 on the REST transport). */
  queries: number;
  points: number;
  stoppedBy: StopReason;
  outcomes: Record<Counted, number>;
  /** What the background allowance (enrichment and commits) still has in this window. */
  budgetLeft: number | null;
  /**
   * By GraphQL: the points the credentials' GraphQL windows still have (what the batches
   * spend; the REST allowance above only pays for fallbacks). null on the REST transport.
   */
  graphqlPointsLeft: number | null;
  pushes: {
    /** GitHub's id: a JSON number with every digit (64-bit ids do not fit a double). */
    repository_id: RawJson;
    repo: string | null;
    ref: string;
    before: string;
    head: string;
    outcome: FetchOutcome;
    commit_count: number | null;
    stored: number | null;
    status: number | null;
  }[];
}

/** The background allowance left in this window (never more than GitHub says remains). */
export function backgroundLeft(b: BudgetSnapshot): number {
  const left = Math.max(0, b.allowance.enrich - b.spent.enrich - b.spent.commits);
  return b.remaining === null ? left : Math.min(left, Math.max(0, b.remaining));
}

export interface RunOptions {
  limit: number;
  shouldStop?: () => boolean;
  onPush?: (r: FetchResult, summary: CommitsRunSummary) => void | Promise<void>;
}

/** The fetch outcomes a run counts: all but the two that end it without a push. */
function emptyOutcomes(): Record<Counted, number> {
  const { idle: _idle, budget_exhausted: _exhausted, ...counted } = emptyFetchOutcomes();
  return counted;
}

/** The transport the worker's cycle would use: GraphQL needs a credential. */
export function commitsTransport(app: App): 'graphql' | 'rest' {
  return app.config.commits.transport === 'graphql' && app.github.graphqlEnabled
    ? 'graphql'
    : 'rest';
}

/**
 * Up to `limit` pushes, by GraphQL batches or fetchOnce (commitsTransport); nothing due,
 * the share or budget, or a rate limit stops it.
 */
export async function runCommits(app: App, opts: RunOptions): Promise<CommitsRunSummary> {
  const summary: CommitsRunSummary = {
    limit: opts.limit,
    transport: commitsTransport(app),
    fetched: 0,
    requests: 0,
    queries: 0,
    points: 0,
    stoppedBy: 'nothing_due',
    outcomes: emptyOutcomes(),
    budgetLeft: null,
    graphqlPointsLeft: null,
    pushes: [],
  };
  /** Counts one push's result (idle and budget_exhausted only their requests). */
  const record = async (r: FetchResult): Promise<void> => {
    summary.requests += r.requests;
    if (r.outcome === 'idle' || r.outcome === 'budget_exhausted') return;
    summary.fetched += 1;
    summary.outcomes[r.outcome] += 1;
    summary.pushes.push({
      repository_id: jsonInteger(r.push!.repositoryId),
      repo: r.repo ?? null,
      ref: r.push!.ref,
      before: r.push!.before,
      head: r.push!.head,
      outcome: r.outcome,
      commit_count: r.commitCount ?? null,
      stored: r.stored ?? null,
      status: r.status ?? null,
    });
    await opts.onPush?.(r, summary);
  };
  // The worker's loop (src/fetching/cycle.ts): as many steps at once as this process's
  // plan has fetchers for the budget it spends, the limit never overshot.
  const loop = { cap: opts.limit, shouldStop: opts.shouldStop };
  const run =
    summary.transport === 'graphql'
      ? await runFetchCycle({
          ...loop,
          lanes: fetchLanes(app, 'graphql', 'commits'),
          stepMax: graphqlStepMax(opts.limit, fetchLanes(app, 'graphql', 'commits')),
          step: async (room) => {
            const b = await fetchGraphQLBatch(app, {
              maxPushes: room,
              onResult: record,
            });
            summary.queries += b.queries;
            summary.points += b.points;
            return { taken: b.claimed, stop: b.stoppedBy ?? undefined, retryAt: b.retryAt };
          },
        })
      : await runFetchCycle({
          ...loop,
          lanes: fetchLanes(app, 'rest', 'commits'),
          step: async () => {
            const r = await fetchOnce(app);
            await record(r);
            return oneEntityReport(r.outcome, r.retryAt);
          },
        });
  summary.stoppedBy = CYCLE_STOP[run.stoppedBy];
  const budget = await app.github.budget();
  summary.budgetLeft = backgroundLeft(budget);
  if (summary.transport === 'graphql') summary.graphqlPointsLeft = graphqlPointsLeft(budget);
  return summary;
}

/** The loop's stop, in this command's words. */
const CYCLE_STOP: Record<CycleStop, StopReason> = {
  idle: 'nothing_due',
  cap: 'limit',
  stopped: 'interrupted',
  budget_exhausted: 'budget',
  rate_limited: 'rate_limited',
};

const STOP_TEXT: Record<StopReason, string> = {
  limit: 'limit reached',
  nothing_due: 'nothing more is due',
  budget: 'the commits share, the background budget or the GraphQL points window says no for now',
  rate_limited: 'GitHub rate-limited us; fetching resumes after the reset',
  interrupted: 'interrupted',
};

export function formatPush(r: FetchResult): string {
  const where = `${r.repo ?? r.push?.repositoryId} ${r.push?.ref} ${r.push?.before.slice(0, 7)}...${r.push?.head.slice(0, 7)}`;
  const count = r.commitCount === undefined ? '' : ` ${r.stored}/${r.commitCount} commits`;
  const status = r.status ? ` (${r.status})` : '';
  const detail =
    r.detail && (r.outcome === 'retry' || r.outcome === 'failed' || r.outcome === 'waiting')
      ? `: ${r.detail}`
      : '';
  return `${where}: ${r.outcome}${count}${status}${detail}`;
}

function formatCounts(s: CommitsRunSummary): string {
  const o = s.outcomes;
  const extra = [
    o.none ? `none ${o.none}` : '',
    o.retry ? `retry ${o.retry}` : '',
    o.waiting ? `waiting ${o.waiting}` : '',
    o.rate_limited ? `rate limited ${o.rate_limited}` : '',
  ].filter(Boolean);
  return [
    `complete ${o.complete}`,
    `partial ${o.partial}`,
    `gone ${o.gone}`,
    `failed ${o.failed}`,
    ...extra,
    `requests ${s.requests}`,
    ...(s.transport === 'graphql' ? [`queries ${s.queries}`, `points ${s.points}`] : []),
  ].join(', ');
}

export function formatSummary(s: CommitsRunSummary): string {
  const budget = s.budgetLeft === null ? '' : `; background budget left ${s.budgetLeft}`;
  const points = s.graphqlPointsLeft === null ? '' : `; GraphQL points left ${s.graphqlPointsLeft}`;
  return `commits: ${s.fetched}/${s.limit} fetched (${formatCounts(s)}) — stopped: ${STOP_TEXT[s.stoppedBy]}${budget}${points}`;
}

export async function main(argv: string[]): Promise<number> {
  const parsed = parseCli(argv, USAGE, {
    limit: { type: 'string' },
    json: { type: 'boolean' },
  });
  if (!parsed) return 0;
  const limit = positiveIntFlag('limit', parsed.values.limit, USAGE);
  if (limit === undefined) throw new UsageError(`--limit N is required\n\n${USAGE}`);

  const app = await createApp({ role: 'commits', writesStoredData: true });
  let interrupted = false;
  const onSignal = () => {
    interrupted = true;
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  // Progress on stderr's last line (a TTY only); results on stdout above it.
  const showBar = !parsed.values.json && process.stderr.isTTY === true;
  try {
    const summary = await runCommits(app, {
      limit,
      shouldStop: () => interrupted,
      onPush: (r, s) => {
        if (parsed.values.json) return;
        terminal.write(process.stdout, `${formatPush(r)}\n`);
        if (showBar) {
          terminal.setStatus(
            process.stderr,
            `${bar(s.fetched / s.limit)} ${s.fetched}/${s.limit} (${formatCounts(s)})`,
          );
        }
      },
    });
    terminal.clearStatus();
    process.stdout.write(
      parsed.values.json ? `${JSON.stringify(summary, null, 2)}\n` : `${formatSummary(summary)}\n`,
    );
    return 0;
  } finally {
    terminal.clearStatus();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await app.close();
  }
}
