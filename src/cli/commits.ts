import { type App, createApp } from '../app.ts';
import { releaseAwaitingPushes } from '../commits/awaiting.ts';
import { fetchCycle } from '../commits/cycle.ts';
import { graphqlPointsLeft } from '../commits/graphql/sizing.ts';
import { emptyFetchOutcomes, type FetchOutcome, type FetchResult } from '../commits/outcomes.ts';
import { UsageError } from '../platform/errors.ts';
import { jsonInteger, type RawJson } from '../platform/json/exact.ts';
import { bar, terminal } from '../platform/terminal.ts';
import { commitsOffReason } from '../store/commits-targets.ts';
import { hasDueCommits } from '../work/commits-due.ts';
import type { CycleStop } from '../work/cycle.ts';
import {
  type BackgroundReading,
  readBackground,
  shareRule,
  withinRemaining,
} from '../work/split.ts';
import { parseCli, positiveIntFlag } from './args.ts';

const USAGE = `
Usage: bin/commits --limit N [--json]

Fetches the commits of up to N due pending pushes now, the repositories served in turn so
that one busy repository cannot hold up the others, by the same transport as the worker:
with COMMITS_TRANSPORT=graphql (the default) and a credential configured, batches of many
pushes in one GraphQL query on the credential's GraphQL points window (a push GraphQL
cannot prove goes to REST compare); otherwise GitHub's compare endpoint, one request a
push (a few for one paged past 250 commits). It runs the worker's own cycle and budget
rule. Runs beside a live worker: pushes are claimed under a lease, so no two processes
fetch the same one, and REST requests spend the background allowance shared with
enrichment: commits' floor of it (COMMITS_SHARE) always, and what enrichment leaves
while nothing is due to enrich. --limit caps the pushes, not the rule.

  --limit N    at most N pushes (required, a positive integer)
  --json       print one JSON summary instead of progress

When nothing is due and this process has a credential, it first makes up to N of the
pushes that waited for one (stored by a process without a credential) due, newest first;
the worker's reconciler does the same a batch at a time.

Prints one line per push and a summary (stdout): fetched, complete, partial, gone, failed
and requests (and GraphQL queries and points), then the REST requests commits may still
spend (budget left) and, by GraphQL, the points its windows have left, and how many that waited for a credential it
made due; on a terminal, a progress bar under them (stderr).
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
  /**
   * Pushes that waited for a credential made due before fetching (none was due, and this
   * process has a credential): newest first, at most the limit.
   */
  released: number;
  outcomes: Record<Counted, number>;
  /**
   * The REST requests commits may still spend in this window by the share rule:
   * their floor of the background allowance, and what enrichment leaves while nothing is due
   * to enrich; never more than GitHub says remains.
   */
  budgetLeft: number | null;
  /** The background allowance at the end: floors, spent, lent, who waits. */
  background: BackgroundReading | null;
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

export interface RunOptions {
  limit: number;
  /** Aborted (SIGINT, SIGTERM) → stops between entities. */
  signal?: AbortSignal;
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
 * Up to `limit` pushes by the worker's own cycle (GraphQL batches or REST compare, as
 * commitsTransport says); nothing due, the share rule or the budget, or a rate limit stops
 * it, as it stops a worker's cycle. --limit caps the pushes, not the rule.
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
    released: 0,
    outcomes: emptyOutcomes(),
    budgetLeft: null,
    background: null,
    graphqlPointsLeft: null,
    pushes: [],
  };
  /** Counts one push's result (the cycle counts the requests, queries and points). */
  const record = async (r: FetchResult): Promise<void> => {
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
  // Nothing due, and this process can fetch: the pushes that waited for a credential first,
  // the newest, as many as the limit (the worker's reconciler does the same a batch a tick).
  if (commitsOffReason(app.config.github) === null && !(await hasDueCommits(app.db))) {
    summary.released = (await releaseAwaitingPushes(app.db, new Date(), opts.limit)).released;
  }
  // The worker's cycle (fetchCycle: the shared fetch loop with commits' transports, the
  // plan's lanes, the share rule before every REST request), capped at the limit.
  const run = await fetchCycle(app, {
    maxPushes: opts.limit,
    signal: opts.signal,
    onResult: record,
  });
  summary.requests = run.requests;
  summary.queries = run.queries ?? 0;
  summary.points = run.points ?? 0;
  summary.stoppedBy = CYCLE_STOP[run.stoppedBy];
  const now = new Date();
  const [reading, budget] = await Promise.all([
    readBackground(app.db, app.github, shareRule(app.config, app.github), now),
    app.github.budget(),
  ]);
  summary.background = reading;
  summary.budgetLeft = withinRemaining(reading.room.commits, budget);
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
  const budget = s.budgetLeft === null ? '' : `; commits budget left ${s.budgetLeft}`;
  const points = s.graphqlPointsLeft === null ? '' : `; GraphQL points left ${s.graphqlPointsLeft}`;
  const released = s.released > 0 ? `; ${s.released} that waited for a credential made due` : '';
  return `commits: ${s.fetched}/${s.limit} fetched (${formatCounts(s)}) — stopped: ${STOP_TEXT[s.stoppedBy]}${budget}${points}${released}`;
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
  const interrupted = new AbortController();
  const onSignal = () => interrupted.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  // Progress on stderr's last line (a TTY only); results on stdout above it.
  const showBar = !parsed.values.json && process.stderr.isTTY === true;
  try {
    const summary = await runCommits(app, {
      limit,
      signal: interrupted.signal,
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
