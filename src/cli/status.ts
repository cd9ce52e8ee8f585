import { createApp } from '../app.ts';
import { systemClock } from '../clock.ts';
import { UsageError } from '../errors.ts';
import { DEFAULT_COVERAGE_HOURS, hourlyCoverage, MAX_COVERAGE_HOURS } from '../status/coverage.ts';
import { readStatus } from '../status/model.ts';
import { renderCoverage } from '../status/render-coverage.ts';
import { renderText } from '../status/render-text.ts';
import { parseCli, positiveIntFlag } from './args.ts';

const USAGE = `
Usage: bin/status [--json]
       bin/status --coverage [--hours N] [--json]

Prints what the status page shows: sources and their last runs, enrichment backlog,
request budget, queues, the last reconcile, webhook deliveries. Read from the database,
so it shows the whole deployment, whichever machine you run it on.

  --coverage   per UTC hour, the pushes stored by the origin each first arrived from
               (poll, webhook, archive), the gaps open and the archive mirrors read
               (view hourly_coverage; docs/mirrors.md)
  --hours N    how many hours back, the current one included (default 48, at most 8784)
  --json       the same report as GET /status (or the coverage rows), for scripts
`;

export async function main(argv: string[]): Promise<number> {
  const cli = parseCli(argv, USAGE, {
    json: { type: 'boolean' },
    coverage: { type: 'boolean' },
    hours: { type: 'string' },
  });
  if (!cli) return 0;
  const hours = positiveIntFlag('hours', cli.values.hours, USAGE);
  if (hours !== undefined && !cli.values.coverage) {
    throw new UsageError(`--hours goes with --coverage\n${USAGE}`);
  }
  if (hours !== undefined && hours > MAX_COVERAGE_HOURS) {
    throw new UsageError(`--hours must be at most ${MAX_COVERAGE_HOURS} (got ${hours})\n${USAGE}`);
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
    const report = await readStatus(app);
    process.stdout.write(
      cli.values.json ? `${JSON.stringify(report, null, 2)}\n` : renderText(report),
    );
    return 0;
  } finally {
    await app.close();
  }
}
