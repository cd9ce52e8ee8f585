import { type App, createApp } from '../app.ts';
import { ENTITY_CLASSES, type EntityClass, isEntityClass } from '../enrichment/entity.ts';
import { type EnrichOutcome, type EnrichResult, enrichOnce } from '../enrichment/runner.ts';
import { UsageError } from '../errors.ts';
import { GitHubAuthFailed } from '../github/errors.ts';
import type { BudgetSnapshot } from '../github/types.ts';
import { jsonInteger, type RawJson } from '../json/exact.ts';
import { quoted } from '../quote.ts';
import { bar, terminal } from '../terminal.ts';
import { parseCli, positiveIntFlag } from './args.ts';
import { describeFailure } from './failure.ts';

const USAGE = `
Usage: bin/enrich --limit N [--class actor|repository] [--json]

Enriches up to N due actors and repositories now, one request each, alternating the
two classes (a class with nothing due is skipped). Runs beside a live worker: entities
are claimed under a lease, so no two processes fetch the same one, and every request
spends the shared enrichment budget.

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
  budgetLeft: number | null;
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

/** What the enrich allowance still has in this window (never more than GitHub says remains). */
export function budgetLeft(b: BudgetSnapshot): number {
  // The background allowance is shared with commit fetching (ADR 0071).
  const left = Math.max(0, b.allowance.enrich - b.spent.enrich - b.spent.commits);
  return b.remaining === null ? left : Math.min(left, Math.max(0, b.remaining));
}

export interface RunOptions {
  limit: number;
  classes: readonly EntityClass[];
  shouldStop?: () => boolean;
  onEntity?: (r: EnrichResult, summary: EnrichRunSummary) => void | Promise<void>;
}

/**
 * Runs enrichOnce up to `limit` times, round-robin over the classes still in play. A
 * class leaves the rotation when it is idle, or when its fair share is used while the
 * other class still has work; a class that left for its share comes back once the
 * other is idle (the split is work-conserving). The budget or a rate limit stops all.
 */
export async function runEnrich(app: App, opts: RunOptions): Promise<EnrichRunSummary> {
  const summary: EnrichRunSummary = {
    limit: opts.limit,
    done: 0,
    stoppedBy: 'nothing_due',
    outcomes: { enriched: 0, not_modified: 0, gone: 0, retry: 0, failed: 0, rate_limited: 0 },
    budgetLeft: null,
    error: null,
    entities: [],
  };
  let active = [...opts.classes];
  let waitingForShare: EntityClass[] = [];
  let turn = 0;
  while (active.length > 0) {
    if (summary.done >= opts.limit) {
      summary.stoppedBy = 'limit';
      break;
    }
    if (opts.shouldStop?.()) {
      summary.stoppedBy = 'interrupted';
      break;
    }
    const cls = active[turn % active.length]!;
    let r: EnrichResult;
    try {
      r = await enrichOnce(app, cls);
    } catch (err) {
      // What was done so far stands (each entity committed on its own): stop, and say why.
      summary.stoppedBy = err instanceof GitHubAuthFailed ? 'auth' : 'error';
      summary.error = {
        code: (err as { code?: unknown }).code?.toString() ?? 'INTERNAL',
        message: err instanceof GitHubAuthFailed ? err.message : describeFailure(err),
      };
      break;
    }
    if (r.outcome === 'idle') {
      active = [...active.filter((c) => c !== cls), ...waitingForShare];
      waitingForShare = [];
      continue;
    }
    if (r.outcome === 'budget_exhausted') {
      if (r.reason === 'fair_share') {
        active = active.filter((c) => c !== cls);
        waitingForShare.push(cls);
        continue;
      }
      summary.stoppedBy = r.reason === 'auth' ? 'auth' : 'budget';
      if (r.reason === 'auth') {
        summary.error = { code: 'GITHUB_AUTH_FAILED', message: r.detail ?? 'GitHub answered 401' };
      }
      break;
    }
    summary.done += 1;
    summary.outcomes[r.outcome] += 1;
    summary.entities.push({
      class: cls,
      id: jsonInteger(r.entityId!),
      name: r.name ?? '',
      outcome: r.outcome,
      status: r.status ?? null,
    });
    turn += 1;
    await opts.onEntity?.(r, summary);
    if (r.outcome === 'rate_limited') {
      summary.stoppedBy = 'rate_limited';
      break;
    }
  }
  if (summary.error) return summary;
  if (active.length === 0 && waitingForShare.length > 0) summary.stoppedBy = 'budget';
  if (summary.done >= opts.limit) summary.stoppedBy = 'limit';
  try {
    summary.budgetLeft = budgetLeft(await app.github.budget());
  } catch (err) {
    summary.stoppedBy = 'error';
    summary.error = { code: 'INTERNAL', message: describeFailure(err) };
  }
  return summary;
}

const STOP_TEXT: Record<StopReason, string> = {
  limit: 'limit reached',
  nothing_due: 'nothing more is due',
  budget: 'the enrichment budget says no for now',
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
  let interrupted = false;
  const onSignal = () => {
    interrupted = true;
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  // The bar is progress, not a result: it lives on stderr's last line (a TTY only), the
  // per-entity lines (results) go to stdout above it, and so do log lines.
  const bar = !parsed.values.json && process.stderr.isTTY === true;
  try {
    const summary = await runEnrich(app, {
      limit,
      classes: only ? [only] : ENTITY_CLASSES,
      shouldStop: () => interrupted,
      onEntity: async (r, s) => {
        if (parsed.values.json) return;
        terminal.write(process.stdout, `${formatEntity(r)}\n`);
        if (bar) {
          terminal.setStatus(process.stderr, progressBar(s, budgetLeft(await app.github.budget())));
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
