import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { type App, createApp } from '../app.ts';
import {
  EXPORT_FORMATS,
  type ExportFormat,
  exportHour,
  type HourExport,
} from '../export/hour-export.ts';
import { hourKnown, hourLines } from '../export/hour-query.ts';
import { parquetName, TABLES } from '../export/parquet.ts';
import { sweepTemporaryFiles } from '../export/temporary-files.ts';
import { inHourSnapshot } from '../export/write.ts';
import { loadConfig } from '../platform/config/config.ts';
import { UsageError } from '../platform/errors.ts';
import { bar, terminal } from '../platform/terminal.ts';
import { type ArchiveHour, hourEnd, hourFileName, parseHour } from '../store/archive-hours.ts';
import { monthHours, parseMonth } from '../store/history-months.ts';
import { hourOpenReasons, type OpenReason, withPending } from '../store/open-hours.ts';
import { parseCli } from './args.ts';

const USAGE = `
Usage: bin/export HOUR|DAY... [--format json,parquet] [--out DIR] [--json]
       bin/export --month YYYY-MM [--out DIR] [--json]

Writes each HOUR as GH Archive writes hours, from this store: one line per stored push
created in that hour (UTC), in the Events API's PushEvent shape with payload.size,
distinct_size and up to 20 commits (the oldest) back, so that anything that reads GH
Archive (DuckDB, ClickHouse, BigQuery loaders) reads it; or as two Parquet tables, one row
a push and one row a commit of a push (every commit, in order); and beside them
DIR/YYYY-MM-DD-H.manifest.json: each file's bytes and SHA-256, the hour's pushes by origin
and by commits state, and the gaps open over it (docs/export.md).

  HOUR           YYYY-MM-DD-H, GH Archive's file name (UTC); a zero-padded hour is that
                 hour (2026-11-29-08 is 2026-11-29-8, and its file is named so)
  DAY            YYYY-MM-DD: its 24 hours (those begun yet, of today)
  --format F     json (the default), parquet, or json,parquet:
                   json     DIR/YYYY-MM-DD-H.json.gz
                   parquet  DIR/pushes/YYYY-MM-DD-H.parquet and
                            DIR/push_commits/YYYY-MM-DD-H.parquet
  --month M      every hour of the month M (YYYY-MM, UTC; those begun yet) in both formats,
                 what retention needs to verify before it drops the month from Postgres
                 (HISTORY_MONTHS); files already there are written again
  --out DIR      the directory to write into (default: the current one, or ARCHIVE_DIR
                 with --month; made if missing)
  --json         print the results as JSON only

The same stored hour is the same bytes every time, and the bytes /archive serves. A push
whose commits are still pending is written without size and commits; one known only by
webhook has "id": null. Pushes of a repository known to be private are never written. Each
file appears whole or not at all (written beside it, then renamed; what a killed export
left there is removed by the next one). An hour still open (being imported, a gap, just
ended) is written with a warning. On a terminal, progress is drawn on stderr.

Exit codes: 0 every hour written; 1 a file could not be written (the others still are) or
the run was interrupted; 2 bad arguments (an hour that is not one, or in the future, an
unknown format) or configuration.
`;

const DAY = /^(\d{4}-\d{2}-\d{2})$/;

/**
 * Every HOUR argument as an hour (a DAY as its hours begun by `now`), or a UsageError naming
 * the first that is not one.
 */
export function parseHours(args: string[], now: Date): ArchiveHour[] {
  const hours = new Map<string, ArchiveHour>();
  for (const arg of args) {
    const day = DAY.exec(arg)?.[1];
    const first = day ? parseHour(`${day}-0`) : null;
    if (first && first.start <= now) {
      for (let h = 0; h < 24; h++) {
        const hour = parseHour(`${day}-${h}`)!;
        if (hour.start <= now) hours.set(hour.name, hour);
      }
      continue;
    }
    // A day wholly in the future is refused as its first hour is.
    const hour = first ?? parseHour(arg);
    if (!hour) {
      const shown = arg.length > 60 ? `${arg.slice(0, 60)}…` : arg;
      throw new UsageError(
        `"${shown}" is not an hour: YYYY-MM-DD-H (UTC), H from 0 to 23, or a day: YYYY-MM-DD\n${USAGE}`,
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

/** `--month YYYY-MM`: its hours begun by `now`; a UsageError for a month not begun or not one. */
export function parseMonthHours(raw: string, now: Date): ArchiveHour[] {
  const month = parseMonth(raw);
  if (!month) {
    throw new UsageError(
      `--month ${JSON.stringify(raw.slice(0, 40))} is not a month: YYYY-MM (UTC)\n${USAGE}`,
    );
  }
  const hours = monthHours(month).filter((h) => h.start <= now);
  if (hours.length === 0) {
    throw new UsageError(`month ${month.name} has not begun; nothing written\n${USAGE}`);
  }
  return hours;
}

interface Outcome {
  hour: string;
  /** The JSON file's path (null when only Parquet was asked for). */
  path: string | null;
  written: HourExport | null;
  error: string | null;
  /** The store knew nothing of the hour (no push, no archive read, before it started). */
  unknown: boolean;
  /** Why the hour may still change, read in the snapshot it was written from. */
  open: OpenReason[];
}

/** `--format`: json, parquet or both, comma-separated. */
export function parseFormats(raw: string | undefined): Set<ExportFormat> {
  const formats = new Set<ExportFormat>();
  for (const f of (raw ?? 'json').split(',')) {
    const name = f.trim();
    if (!(EXPORT_FORMATS as readonly string[]).includes(name)) {
      throw new UsageError(
        `--format ${JSON.stringify(raw)}: each of ${EXPORT_FORMATS.join(', ')}\n${USAGE}`,
      );
    }
    formats.add(name as ExportFormat);
  }
  return formats;
}

async function exportOne(
  app: App,
  hour: ArchiveHour,
  out: string,
  formats: ReadonlySet<ExportFormat>,
  o: { showBar: boolean; signal: AbortSignal; now: Date },
): Promise<Outcome> {
  const json = formats.has('json') ? path.join(out, hourFileName(hour)) : null;
  const first = json ?? path.join(out, 'pushes', parquetName(hour));
  const outcome: Outcome = {
    hour: hour.name,
    path: json,
    written: null,
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
      const draw = (what: string, n: number) =>
        terminal.setStatus(
          process.stderr,
          `${bar(total ? Math.min(1, n / total) : 1)} ${hour.name}: ${n.toLocaleString('en-US')}/${total.toLocaleString('en-US')} ${what}`,
        );
      if (o.showBar) draw('pushes', 0);
      const t0 = Date.now();
      const w = await exportHour(run, hour, out, formats, {
        signal: o.signal,
        onLines: o.showBar ? (n) => draw('pushes', n) : undefined,
        onRows: o.showBar
          ? (table, n) => draw(table === 'pushes' ? 'pushes (parquet)' : 'commits', n)
          : undefined,
      });
      outcome.written = w;
      outcome.open = withPending(open, w.counts.by_commits_state.pending);
      app.logger.info(
        {
          event: 'export.hour_written',
          hour: hour.name,
          pushes: w.counts.pushes,
          pending: w.counts.by_commits_state.pending,
          bytes: w.json?.bytes,
          sha256: w.json?.sha256,
          parquet: w.parquet ?? undefined,
          manifest: w.manifest.path,
          seconds: (Date.now() - t0) / 1000,
          to: first,
        },
        `${hour.name}: ${w.counts.pushes} pushes written to ${first}`,
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
      `export: warning: hour ${hour.name} is not over yet: pushes arriving later are not in ${first}\n`,
    );
  } else if (outcome.written && outcome.open.some((r) => r !== 'commits_pending')) {
    terminal.write(
      process.stderr,
      `export: warning: hour ${hour.name} is still open (${outcome.open.join(', ')}): pushes may still be added after ${first} was written\n`,
    );
  } else if (outcome.unknown && outcome.written) {
    terminal.write(
      process.stderr,
      `export: warning: the store holds nothing of hour ${hour.name}: ${first} is empty\n`,
    );
  }
  return outcome;
}

function formatOutcome(o: Outcome): string {
  const w = o.written;
  if (!w) return `${o.hour}: failed: ${o.error}`;
  const parts: string[] = [];
  if (w.json) {
    const f = w.json;
    const detail = [`${f.withCommits} with commits`];
    if (f.pending) detail.push(`${f.pending} pending`);
    if (f.pushes - f.withSize - f.pending > 0)
      detail.push(`${f.pushes - f.withSize - f.pending} without a count`);
    parts.push(
      `${o.hour}: ${f.pushes} pushes (${detail.join(', ')}) → ${o.path} (${f.bytes} bytes, sha256 ${f.sha256.slice(0, 16)}…)`,
    );
  }
  if (w.parquet) {
    const { pushes, push_commits } = w.parquet;
    parts.push(
      `${o.hour}: ${pushes.rows} pushes, ${push_commits.rows} commits → pushes/${o.hour}.parquet (${pushes.bytes} bytes), push_commits/${o.hour}.parquet (${push_commits.bytes} bytes)`,
    );
  }
  return parts.join('\n');
}

export async function main(argv: string[]): Promise<number> {
  const parsed = parseCli(
    argv,
    USAGE,
    {
      out: { type: 'string' },
      json: { type: 'boolean' },
      format: { type: 'string' },
      month: { type: 'string' },
    },
    { allowPositionals: true },
  );
  if (!parsed) return 0;
  const { values, positionals } = parsed;
  const now = new Date();
  let hours: ArchiveHour[];
  let formats: Set<ExportFormat>;
  if (values.month !== undefined) {
    if (positionals.length > 0 || values.format !== undefined) {
      throw new UsageError(`--month takes no HOUR and no --format (it writes both)\n${USAGE}`);
    }
    hours = parseMonthHours(values.month, now);
    formats = new Set(EXPORT_FORMATS);
  } else {
    if (positionals.length === 0) throw new UsageError(`give at least one HOUR\n${USAGE}`);
    formats = parseFormats(values.format);
    hours = parseHours(positionals, now);
  }
  // --month's default directory is the configuration's: read it before any file is touched.
  const archiveDir = values.month !== undefined ? loadConfig().history.archiveDir : null;
  if (values.month !== undefined && values.out === undefined && archiveDir === null) {
    throw new UsageError(`--month writes into --out DIR or ARCHIVE_DIR: neither is set\n${USAGE}`);
  }
  const out = path.resolve(values.out ?? archiveDir ?? '.');
  await mkdir(out, { recursive: true });
  // What an export killed here before left behind (never a running export's file).
  let swept = { files: 0, bytes: 0 };
  for (const dir of [out, path.join(out, 'pushes'), path.join(out, 'push_commits')]) {
    const s = await sweepTemporaryFiles(dir);
    swept = { files: swept.files + s.files.length, bytes: swept.bytes + s.bytes };
  }
  if (swept.files > 0) {
    terminal.write(
      process.stderr,
      `export: removed ${swept.files} temporary files (${swept.bytes} bytes) that killed exports left in ${out}\n`,
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
      const o = await exportOne(app, hour, out, formats, { showBar, signal: abort.signal, now });
      outcomes.push(o);
      if (!values.json) terminal.write(process.stdout, `${formatOutcome(o)}\n`);
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await app.close();
  }
  if (values.json) {
    const files = outcomes.map((o) => {
      const w = o.written;
      const tables = w?.parquet
        ? Object.fromEntries(
            TABLES.map((t) => [
              t,
              { path: path.join(out, t, parquetName(hourOf(o))), ...w.parquet![t] },
            ]),
          )
        : null;
      return {
        hour: o.hour,
        path: o.path,
        ok: w !== null,
        error: o.error,
        known: !o.unknown,
        pushes: w?.counts.pushes ?? null,
        with_size: w?.json?.withSize ?? null,
        with_commits: w?.json?.withCommits ?? null,
        pending: w?.counts.by_commits_state.pending ?? null,
        commits: w?.json?.commits ?? null,
        open: w ? o.open : null,
        bytes: w?.json?.bytes ?? null,
        sha256: w?.json?.sha256 ?? null,
        parquet: tables,
        manifest: w ? w.manifest : null,
      };
    });
    process.stdout.write(`${JSON.stringify({ files }, null, 2)}\n`);
  }
  const failed = outcomes.some((o) => o.written === null) || outcomes.length < hours.length;
  return failed ? 1 : 0;
}

function hourOf(o: Outcome): ArchiveHour {
  return parseHour(o.hour)!;
}
