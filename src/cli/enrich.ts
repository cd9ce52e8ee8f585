import { type App, createApp } from '../app.ts';
import type { EntityClass } from '../budget/types.ts';
import { enrichClasses } from '../enrichment/cycle.ts';
import type { EnrichOutcome, EnrichResult } from '../enrichment/runner.ts';
import { GitHubAuthFailed } from '../github/errors.ts';
import { UsageError } from '../platform/errors.ts';
import { jsonInteger, type RawJson } from '../platform/json/exact.ts';
import { quoted } from '../platform/quote.ts';
import { bar, terminal } from '../platform/terminal.ts';
import type { CycleStop } from '../work/cycle.ts';
import { ENTITY_CLASSES, isEntityClass } from '../work/entity.ts';
import {
  type BackgroundReading,
  readBackground,
  shareRule,
  withinRemaining,
} from '../work/split.ts';
import { parseCli, positiveIntFlag } from './args.ts';
import { describeFailure } from './failure.ts';

const USAGE = `
Usage: bin/enrich --limit N [--class actor|repository] [--json]

Enriches up to N due actors and repositories now, one request each, by the worker's own
loop and budget rule: the two classes in turn (a class with nothing due is skipped), one
profile in flight a credential. Runs beside a live worker: entities are claimed under a
lease, so no two processes fetch the same one, and every request spends the background
allowance it shares with commit fetching: enrichment's floor of it always, and the part
commits leave unused while they wait for no REST request. --limit caps the entities, not
the rule.

  --limit N    at most N entities (required, a positive integer)
  --class C    only actors or only repositories
  --json       print one JSON summary instead of progress

Prints one line per entity and a summary (stdout); on a terminal, a progress bar under
them (stderr) that ends with the summary's counts.
Exit codes: 0 stopped normally (limit reached, nothing due, budget or rate limit);
1 GitHub rejected every credential (401), or an error (the summary of what was done
before it is still printed); 2 bad arguments or configuration.
`;

export type StopReason =
  | 'limit'
  | 'nothing_due'
  | 'budget'
  | 'rate_limited'
  | 'interrupted'
  | 'auth'
  | 'error';

export interface EnrichRunSummary {
  limit: number;
  done: number;
  stoppedBy: StopReason;
  outcomes: Record<Exclude<EnrichOutcome, 'idle' | 'budget_exhausted'>, number>;
  /** What enrichment may still spend in this window (budgetLeft()); null after an error. */
  budgetLeft: number | null;
  /** The background allowance at the end: floors, spent, lent, who waits. */
  background: BackgroundReading | null;
  /** Why the pass stopped early, when it was GitHub's 401s or an error (one line). */
  error: { code: string; message: string } | null;
  entities: {
    class: EntityClass;
    /** GitHub's id: a JSON number with every digit (64-bit ids do not fit a double). */
    id: RawJson;
    name: string;
    outcome: EnrichOutcome;
    status: number | null;
  }[];
}

/**
 * What enrichment may still spend in this window by the share rule: past its
 * floor only what commits leave while they do not wait for REST, and never more than GitHub
 * says remains.
 */
export async function budgetLeft(app: App): Promise<number> {
  const now = new Date();
  const [reading, pool] = await Promise.all([
    readBackground(app.db, app.github, shareRule(app.config, app.github), now),
    app.github.budget(),
  ]);
  return withinRemaining(reading.room.enrich, pool);
}

export interface RunOptions {
  limit: number;
  classes: readonly EntityClass[];
  /** Aborted (SIGINT, SIGTERM) → stops between entities. */
  signal?: AbortSignal;
  onEntity?: (r: EnrichResult, summary: EnrichRunSummary) => void | Promise<void>;
}

/**
 * The worker's enrichment cycle (enrichClasses: the shared fetch loop, the share rule, the
 * plan's lanes) over the classes asked for, capped at `limit` entities: the classes in turn,
 * a class that is idle or used its half while the other has work leaving the turn. The
 * budget, the share rule or a rate limit stops it, as it stops a worker's cycle.
 */
export async function runEnrich(app: App, opts: RunOptions): Promise<EnrichRunSummary> {
  const summary: EnrichRunSummary = {
    limit: opts.limit,
    done: 0,
    stoppedBy: 'nothing_due',
    outcomes: { enriched: 0, not_modified: 0, gone: 0, retry: 0, failed: 0, rate_limited: 0 },
    budgetLeft: null,
    background: null,
    error: null,
    entities: [],
  };
  try {
    const run = await enrichClasses(app, opts.classes, {
      maxEntities: opts.limit,
      signal: opts.signal,
      onResult: async (r) => {
        if (r.outcome === 'idle' || r.outcome === 'budget_exhausted') return;
        summary.done += 1;
        summary.outcomes[r.outcome] += 1;
        summary.entities.push({
          class: r.class,
          id: jsonInteger(r.entityId!),
          name: r.name ?? '',
          outcome: r.outcome,
          status: r.status ?? null,
        });
        await opts.onEntity?.(r, summary);
      },
    });
    summary.stoppedBy = CYCLE_STOP[run.stoppedBy];
    if (run.refusal?.reason === 'auth') {
      summary.stoppedBy = 'auth';
      summary.error = {
        code: 'GITHUB_AUTH_FAILED',
        message: run.refusal.detail ?? 'GitHub answered 401',
      };
    }
  } catch (err) {
    // What was done so far stands (each entity committed on its own): stop, and say why.
    summary.stoppedBy = err instanceof GitHubAuthFailed ? 'auth' : 'error';
    summary.error = {
      code: (err as { code?: unknown }).code?.toString() ?? 'INTERNAL',
      message: err instanceof GitHubAuthFailed ? err.message : describeFailure(err),
    };
  }
  if (summary.error) return summary;
  try {
    const now = new Date();
    const [reading, pool] = await Promise.all([
      readBackground(app.db, app.github, shareRule(app.config, app.github), now),
      app.github.budget(),
    ]);
    summary.background = reading;
    summary.budgetLeft = withinRemaining(reading.room.enrich, pool);
  } catch (err) {
    summary.stoppedBy = 'error';
    summary.error = { code: 'INTERNAL', message: describeFailure(err) };
  }
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
  budget:
    "the background budget (or, while commits wait, enrichment's floor of it) says no for now",
  rate_limited: 'GitHub rate-limited us; enrichment resumes after the reset',
  interrupted: 'interrupted',
  auth: 'GitHub rejected every credential (401)',
  error: 'an error',
};

export function formatEntity(r: EnrichResult): string {
  const status = r.status ? ` (${r.status})` : '';
  const detail =
    r.detail && (r.outcome === 'retry' || r.outcome === 'failed') ? `: ${r.detail}` : '';
  return `${r.class} ${r.entityId} ${r.name ?? ''}: ${r.outcome}${status}${detail}`;
}

/** The outcome counts, worded the same in the progress bar and the summary. */
function formatCounts(o: EnrichRunSummary['outcomes']): string {
  const counts = `enriched ${o.enriched}, not modified ${o.not_modified}, gone ${o.gone}, retry ${o.retry}, failed ${o.failed}`;
  return o.rate_limited > 0 ? `${counts}, rate limited ${o.rate_limited}` : counts;
}

export function formatSummary(s: EnrichRunSummary): string {
  const budget = s.budgetLeft === null ? '' : `; enrich budget left ${s.budgetLeft}`;
  const why = s.error ? `: ${s.error.message}` : '';
  return `enrich: ${s.done}/${s.limit} done (${formatCounts(s.outcomes)}) — stopped: ${STOP_TEXT[s.stoppedBy]}${why}${budget}`;
}

function progressBar(s: EnrichRunSummary, left: number): string {
  return `${bar(s.done / s.limit)} ${s.done}/${s.limit} (${formatCounts(s.outcomes)}) budget left ${left}`;
}

export async function main(argv: string[]): Promise<number> {
  const parsed = parseCli(argv, USAGE, {
    limit: { type: 'string' },
    class: { type: 'string' },
    json: { type: 'boolean' },
  });
  if (!parsed) return 0;
  const limit = positiveIntFlag('limit', parsed.values.limit, USAGE);
  if (limit === undefined) throw new UsageError(`--limit N is required\n\n${USAGE}`);
  const only = parsed.values.class;
  if (only !== undefined && !isEntityClass(only)) {
    throw new UsageError(`--class must be actor or repository (got ${quoted(only)})\n\n${USAGE}`);
  }

  const app = await createApp({ role: 'enrich' });
  const interrupted = new AbortController();
  const onSignal = () => interrupted.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  // The bar is progress, not a result: it lives on stderr's last line (a TTY only), the
  // per-entity lines (results) go to stdout above it, and so do log lines.
  const bar = !parsed.values.json && process.stderr.isTTY === true;
  try {
    const summary = await runEnrich(app, {
      limit,
      classes: only ? [only] : ENTITY_CLASSES,
      signal: interrupted.signal,
      onEntity: async (r, s) => {
        if (parsed.values.json) return;
        terminal.write(process.stdout, `${formatEntity(r)}\n`);
        if (bar) {
          terminal.setStatus(process.stderr, progressBar(s, await budgetLeft(app)));
        }
      },
    });
    terminal.clearStatus();
    process.stdout.write(
      parsed.values.json ? `${JSON.stringify(summary, null, 2)}\n` : `${formatSummary(summary)}\n`,
    );
    if (summary.error) process.stderr.write(`enrich: ${summary.error.message}\n`);
    return summary.error ? 1 : 0;
  } finally {
    terminal.clearStatus();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await app.close();
  }
}
