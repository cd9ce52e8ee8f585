import { createApp } from '../app.ts';
import { UsageError } from '../errors.ts';
import { readStatus } from '../status/model.ts';
import { renderText } from '../status/render-text.ts';
import { InvalidSourceQuery, parseSourceQuery, type SourceQuery } from '../status/sources.ts';
import { parseCli } from './args.ts';

const USAGE = `
Usage: bin/status [--json] [--sources N] [--page P] [--state STATE] [--kind KIND]

Prints what the status page shows: sources and their last runs, enrichment backlog,
request budget, queues, the last reconcile, webhook deliveries. Read from the database,
so it shows the whole deployment, whichever machine you run it on.

  --json           the same report as GET /status, for scripts
  --sources N      list N sources in full (default 50, at most 1000; 0: counts only)
  --page P         which page of them (default 1)
  --state STATE    only sources that are ok, new, failing, overdue or disabled
  --kind KIND      only public, repo, org or user sources
Sources are always summed by state and kind, with the worst (most failing, most overdue)
and the latest polled shown in full; the same paging is ?sources=N&page=P&state=S&kind=K
on GET /status and GET /.
`;

export async function main(argv: string[]): Promise<number> {
  const cli = parseCli(argv, USAGE, {
    json: { type: 'boolean' },
    sources: { type: 'string' },
    page: { type: 'string' },
    state: { type: 'string' },
    kind: { type: 'string' },
  });
  if (!cli) return 0;
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
    const report = await readStatus(app, query);
    process.stdout.write(
      cli.values.json ? `${JSON.stringify(report, null, 2)}\n` : renderText(report),
    );
    return 0;
  } finally {
    await app.close();
  }
}
