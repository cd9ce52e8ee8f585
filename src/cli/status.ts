import { createApp } from '../app.ts';
import { readStatus } from '../status/model.ts';
import { renderText } from '../status/render-text.ts';
import { parseCli } from './args.ts';

const USAGE = `
Usage: bin/status [--json]

Prints what the status page shows: sources and their last runs, enrichment backlog,
request budget, queues, the last reconcile, webhook deliveries. Read from the database,
so it shows the whole deployment, whichever machine you run it on.

  --json   the same report as GET /status, for scripts
`;

export async function main(argv: string[]): Promise<number> {
  const cli = parseCli(argv, USAGE, { json: { type: 'boolean' } });
  if (!cli) return 0;
  const app = await createApp({ role: 'status', poolMax: 2 });
  try {
    const report = await readStatus(app);
    process.stdout.write(
      cli.values.json ? `${JSON.stringify(report, null, 2)}\n` : renderText(report),
    );
    return 0;
  } finally {
    await app.close();
  }
}
