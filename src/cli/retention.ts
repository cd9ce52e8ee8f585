import { createApp } from '../app.ts';
import { type MonthOutcome, type RetentionReport, runRetention } from '../jobs/month-retention.ts';
import { parseCli } from './args.ts';

const USAGE = `
Usage: bin/retention [--dry-run] [--no-export] [--json]

One retention pass, as the maintenance job runs hourly, without its time limit. With
HISTORY_MONTHS=N, each month of pushes older than the current month and the N-1 before it,
oldest first:
  1. its hours missing from ARCHIVE_DIR (no manifest there) are exported into it: the JSON
     hour, pushes/ and push_commits/ Parquet, the manifest (never over a file already there)
  2. every hour is verified by reading the files in ARCHIVE_DIR and RETENTION_MIRROR: each
     file there, with the bytes and SHA-256 its manifest lists; the manifest's pushes the
     ones the store holds; the JSON hour byte for byte what the store writes now; the
     Parquet tables readable with their rows
  3. only then the month's partition of push_events is detached and dropped, and its
     push keys deleted, in one transaction that records the month (history_months)
A month with any hour unexported or unverifiable is kept, and said why. Nothing is done
when HISTORY_MONTHS is unset. A dropped month reads back with bin/backfill from the files.

  --dry-run    verify and say what would be dropped: export, drop and record nothing
  --no-export  verify what is there; export no missing hour
  --json       print the report as JSON

Exit codes: 0 done (months kept are not an error); 1 error; 2 bad arguments or
configuration.
`;

function formatMonth(m: MonthOutcome): string {
  const size = `${(m.bytes / 1_048_576).toFixed(1)} MiB`;
  const exported = m.exportedHours > 0 ? `, ${m.exportedHours} hours exported` : '';
  switch (m.action) {
    case 'dropped':
      return `${m.month}: dropped (${size}, ${m.pushes} pushes${exported})`;
    case 'would_drop':
      return `${m.month}: would be dropped (${size}, ${m.pushes} pushes, every hour verified)`;
    case 'interrupted':
      return `${m.month}: interrupted before it was verified${exported}`;
    default:
      return `${m.month}: kept (${size}${exported}): ${m.reason}`;
  }
}

export function formatRetention(r: RetentionReport): string[] {
  if (r.historyMonths === null) {
    return ['retention is off (HISTORY_MONTHS is unset): every month is kept'];
  }
  const lines = [
    `keeping ${r.firstKept} and later (HISTORY_MONTHS=${r.historyMonths}); older months are verified in ${r.places.join(', ')}`,
  ];
  if (r.months.length === 0) lines.push('no month older than that is stored');
  for (const m of r.months) lines.push(formatMonth(m));
  return lines;
}

export async function main(argv: string[]): Promise<number> {
  const cli = parseCli(argv, USAGE, {
    'dry-run': { type: 'boolean' },
    'no-export': { type: 'boolean' },
    json: { type: 'boolean' },
  });
  if (!cli) return 0;
  const app = await createApp({ role: 'retention', poolMax: 2 });
  const abort = new AbortController();
  const onSignal = () => abort.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const report = await runRetention(app, {
      now: new Date(),
      dryRun: cli.values['dry-run'] === true,
      exportMissing: cli.values['no-export'] !== true,
      signal: abort.signal,
    });
    process.stdout.write(
      cli.values.json
        ? `${JSON.stringify(report, null, 2)}\n`
        : `${formatRetention(report).join('\n')}\n`,
    );
    return report.months.some((m) => m.action === 'interrupted') ? 1 : 0;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await app.close();
  }
}
