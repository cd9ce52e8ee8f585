import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { type App, createApp } from '../app.ts';
import { hourKnown, hourLines } from '../export/hour-query.ts';
import { sweepTemporaryFiles } from '../export/temporary-files.ts';
import { type HourFile, inHourSnapshot, writeHourFile } from '../export/write.ts';
import { UsageError } from '../platform/errors.ts';
import { bar, terminal } from '../platform/terminal.ts';
import { type ArchiveHour, hourEnd, hourFileName, parseHour } from '../store/archive-hours.ts';
import { hourOpenReasons, type OpenReason, withPending } from '../store/open-hours.ts';
import { parseCli } from './args.ts';

const USAGE = `
Usage: bin/export HOUR... [--out DIR] [--json]

Writes each HOUR as DIR/YYYY-MM-DD-H.json.gz, a GH Archive hour file of this store: one
line per stored push created in that hour (UTC), in the Events API's PushEvent shape with
payload.size, distinct_size and up to 20 commits (the oldest) back, so that anything that
reads GH Archive (DuckDB, ClickHouse, BigQuery loaders) reads it (docs/export.md).

  HOUR        YYYY-MM-DD-H, GH Archive's file name (UTC); a zero-padded hour is that
              hour (2026-11-29-08 is 2026-11-29-8, and its file is named so).
              A day: bin/export 2026-11-29-{0..23}
  --out DIR   the directory to write into (default: the current one; made if missing)
  --json      print the results as JSON only

The same stored hour is the same bytes every time. A push whose commits are still pending
is written without size and commits; one known only by webhook has "id": null. Pushes of a
repository known to be private are never written. Each file appears whole or not at all
(written beside it, then renamed; what a killed export left there is removed by the next
one). An hour still open (being imported, a gap, just ended) is written with a warning. On
a terminal, progress is drawn on stderr.

Exit codes: 0 every hour written; 1 a file could not be written (the others still are) or
the run was interrupted; 2 bad arguments (an hour that is not one, or in the future) or
configuration.
`;

/** Every HOUR argument as an hour, or a UsageError naming the first that is not one. */
export function parseHours(args: string[], now: Date): ArchiveHour[] {
  const hours = new Map<string, ArchiveHour>();
  for (const arg of args) {
    const hour = parseHour(arg);
    if (!hour) {
      const shown = arg.length > 60 ? `${arg.slice(0, 60)}…` : arg;
      throw new UsageError(
        `"${shown}" is not an hour: YYYY-MM-DD-H (UTC), H from 0 to 23\n${USAGE}`,
      );
    }
    if (hour.start > now) {
      throw new UsageError(
        `hour ${hour.name} is in the future (it starts ${hour.start.toISOString()}); nothing written\n${USAGE}`,
      );
    }
    hours.set(hour.name, hour);
  }
  return [...hours.values()];
}

interface Outcome {
  hour: string;
  path: string;
  file: HourFile | null;
  error: string | null;
  /** The store knew nothing of the hour (no push, no archive read, before it started). */
  unknown: boolean;
  /** Why the hour may still change, read in the snapshot it was written from. */
  open: OpenReason[];
}

async function exportOne(
  app: App,
  hour: ArchiveHour,
  out: string,
  o: { showBar: boolean; signal: AbortSignal; now: Date },
): Promise<Outcome> {
  const file = path.join(out, hourFileName(hour));
  const outcome: Outcome = {
    hour: hour.name,
    path: file,
    file: null,
    error: null,
    unknown: false,
    open: [],
  };
  try {
    await inHourSnapshot(app.db, async (run) => {
      const from = hour.start;
      const to = hourEnd(hour);
      outcome.unknown = !(await hourKnown(run, from, to));
      const open = hourEnd(hour) > o.now ? [] : await hourOpenReasons(run, hour, o.now);
      const total = o.showBar ? await hourLines(run, from, to) : 0;
      const draw = (n: number) =>
        terminal.setStatus(
          process.stderr,
          `${bar(total ? n / total : 1)} ${hour.name}: ${n.toLocaleString('en-US')}/${total.toLocaleString('en-US')} pushes`,
        );
      if (o.showBar) draw(0);
      const t0 = Date.now();
      outcome.file = await writeHourFile(run, hour, file, {
        signal: o.signal,
        onLines: o.showBar ? draw : undefined,
      });
      outcome.open = withPending(open, outcome.file.pending);
      app.logger.info(
        {
          event: 'export.hour_written',
          hour: hour.name,
          pushes: outcome.file.pushes,
          pending: outcome.file.pending,
          bytes: outcome.file.bytes,
          sha256: outcome.file.sha256,
          seconds: (Date.now() - t0) / 1000,
          to: file,
        },
        `${hour.name}: ${outcome.file.pushes} pushes written to ${file}`,
      );
    });
  } catch (err) {
    outcome.error = o.signal.aborted ? 'interrupted' : (err as Error).message;
  } finally {
    terminal.clearStatus();
  }
  if (hourEnd(hour) > o.now) {
    terminal.write(
      process.stderr,
      `export: warning: hour ${hour.name} is not over yet: pushes arriving later are not in ${file}\n`,
    );
  } else if (outcome.file && outcome.open.some((r) => r !== 'commits_pending')) {
    terminal.write(
      process.stderr,
      `export: warning: hour ${hour.name} is still open (${outcome.open.join(', ')}): pushes may still be added after ${file} was written\n`,
    );
  } else if (outcome.unknown && outcome.file) {
    terminal.write(
      process.stderr,
      `export: warning: the store holds nothing of hour ${hour.name}: ${file} is empty\n`,
    );
  }
  return outcome;
}

function formatOutcome(o: Outcome): string {
  if (!o.file) return `${o.hour}: failed: ${o.error}`;
  const f = o.file;
  const detail = [`${f.withCommits} with commits`];
  if (f.pending) detail.push(`${f.pending} pending`);
  if (f.pushes - f.withSize - f.pending > 0)
    detail.push(`${f.pushes - f.withSize - f.pending} without a count`);
  return `${o.hour}: ${f.pushes} pushes (${detail.join(', ')}) → ${o.path} (${f.bytes} bytes, sha256 ${f.sha256.slice(0, 16)}…)`;
}

export async function main(argv: string[]): Promise<number> {
  const parsed = parseCli(
    argv,
    USAGE,
    { out: { type: 'string' }, json: { type: 'boolean' } },
    { allowPositionals: true },
  );
  if (!parsed) return 0;
  const { values, positionals } = parsed;
  if (positionals.length === 0) throw new UsageError(`give at least one HOUR\n${USAGE}`);
  const now = new Date();
  const hours = parseHours(positionals, now);
  const out = path.resolve(values.out ?? '.');
  await mkdir(out, { recursive: true });
  // What an export killed here before left behind (never a running export's file).
  const swept = await sweepTemporaryFiles(out);
  if (swept.files.length > 0) {
    terminal.write(
      process.stderr,
      `export: removed ${swept.files.length} temporary files (${swept.bytes} bytes) that killed exports left in ${out}\n`,
    );
  }

  const app = await createApp({ role: 'export', poolMax: 2 });
  const abort = new AbortController();
  const onSignal = () => abort.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const showBar = !values.json && process.stderr.isTTY === true;
  const outcomes: Outcome[] = [];
  try {
    for (const hour of hours) {
      if (abort.signal.aborted) break;
      const o = await exportOne(app, hour, out, { showBar, signal: abort.signal, now });
      outcomes.push(o);
      if (!values.json) terminal.write(process.stdout, `${formatOutcome(o)}\n`);
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await app.close();
  }
  if (values.json) {
    const files = outcomes.map((o) => ({
      hour: o.hour,
      path: o.path,
      ok: o.file !== null,
      error: o.error,
      known: !o.unknown,
      pushes: o.file?.pushes ?? null,
      with_size: o.file?.withSize ?? null,
      with_commits: o.file?.withCommits ?? null,
      pending: o.file?.pending ?? null,
      commits: o.file?.commits ?? null,
      open: o.file ? o.open : null,
      bytes: o.file?.bytes ?? null,
      sha256: o.file?.sha256 ?? null,
    }));
    process.stdout.write(`${JSON.stringify({ files }, null, 2)}\n`);
  }
  const failed = outcomes.some((o) => o.file === null) || outcomes.length < hours.length;
  return failed ? 1 : 0;
}
