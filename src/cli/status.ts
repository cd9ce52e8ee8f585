import { createApp } from '../app.ts';
import { systemClock } from '../platform/clock.ts';
import { UsageError } from '../platform/errors.ts';
import { DEFAULT_COVERAGE_HOURS, hourlyCoverage, MAX_COVERAGE_HOURS } from '../status/coverage.ts';
import { readStatus } from '../status/model.ts';
import { renderCoverage } from '../status/render-coverage.ts';
import { renderText } from '../status/render-text.ts';
import { InvalidSourceQuery, parseSourceQuery, type SourceQuery } from '../status/sources.ts';
import { parseCli, positiveIntFlag } from './args.ts';

const USAGE = `
Usage: bin/status [--json] [--sources N] [--page P] [--state STATE] [--kind KIND]
       bin/status --coverage [--hours N] [--json]

Prints what the status page shows, read from the database, so it shows the whole
deployment whichever machine you run it on:
  pushes held (by origin), and pushed and arrived in the last 24 hours; runs and gaps of
  the last 24 hours; rejected events (set aside, by reason); gaps (open, filled,
  unavailable, the open ones listed) and the last backfill; the archive mirrors; the
  months of history (kept, exported, dropped under HISTORY_MONTHS, with their bytes);
  sources counted by state and kind, the most failing, the most overdue, the latest
  polled, and one page of them; commits (pushes by state, the fetch backlog and rate,
  the backlog by origin, GraphQL's points and pushes a point, whether commits are off and
  the pushes waiting for a credential); the enrichment backlog; the request budget and
  the credentials (the ones the workers use, from the ledger and the rate-limits table,
  not this shell's); queues and the last reconcile; webhooks.

  --json           the same report as GET /status (or the coverage rows), for scripts
  --sources N      list N sources in full (default 50, at most 1000; 0: counts only)
  --page P         which page of them (default 1)
  --state STATE    only sources that are ok, new, failing, overdue or disabled
  --kind KIND      only public, repo, org or user sources
  --coverage       per UTC hour, the pushes stored by the origin each first arrived from
                   (poll, webhook, archive), the gaps open and the archive mirrors read
                   (view hourly_coverage; docs/mirrors.md)
  --hours N        with --coverage: how many hours back, the current one included
                   (default 48, at most 8784)
Sources are always summed by state and kind, with the worst (most failing, most overdue)
and the latest polled shown in full; the same paging is ?sources=N&page=P&state=S&kind=K
on GET /status and GET /.
`;

export async function main(argv: string[]): Promise<number> {
  const cli = parseCli(argv, USAGE, {
    json: { type: 'boolean' },
    coverage: { type: 'boolean' },
    hours: { type: 'string' },
    sources: { type: 'string' },
    page: { type: 'string' },
    state: { type: 'string' },
    kind: { type: 'string' },
  });
  if (!cli) return 0;
  const hours = positiveIntFlag('hours', cli.values.hours, USAGE);
  if (hours !== undefined && !cli.values.coverage) {
    throw new UsageError(`--hours goes with --coverage\n${USAGE}`);
  }
  if (hours !== undefined && hours > MAX_COVERAGE_HOURS) {
    throw new UsageError(`--hours must be at most ${MAX_COVERAGE_HOURS} (got ${hours})\n${USAGE}`);
  }
  let query: SourceQuery;
  try {
    const v = cli.values as Record<string, string | boolean | undefined>;
    query = parseSourceQuery((name) => (typeof v[name] === 'string' ? (v[name] as string) : null));
  } catch (err) {
    if (err instanceof InvalidSourceQuery) throw new UsageError(`--${err.message}\n${USAGE}`);
    throw err;
  }
  const app = await createApp({ role: 'status', poolMax: 2 });
  try {
    if (cli.values.coverage) {
      const rows = await hourlyCoverage(app.db, systemClock.now(), hours ?? DEFAULT_COVERAGE_HOURS);
      process.stdout.write(
        cli.values.json ? `${JSON.stringify({ coverage: rows }, null, 2)}\n` : renderCoverage(rows),
      );
      return 0;
    }
    const report = await readStatus(app, query);
    process.stdout.write(
      cli.values.json ? `${JSON.stringify(report, null, 2)}\n` : renderText(report),
    );
    return 0;
  } finally {
    await app.close();
  }
}
