import { statSync } from 'node:fs';
import pino from 'pino';
import { type App, createApp } from '../app.ts';
import { archiveHourSource, type ByteSource, localFileSource } from '../backfill/archive.ts';
import { scopeOf } from '../backfill/events.ts';
import { type FillDeps, fillGaps, type GapFillResult } from '../backfill/fill.ts';
import { knownRepoId } from '../backfill/gaps.ts';
import { parseHour } from '../backfill/hours.ts';
import {
  type ImportProgress,
  type ImportResult,
  type ImportTarget,
  importFile,
} from '../backfill/import.ts';
import { loadConfig } from '../config.ts';
import { NotFound, UsageError } from '../errors.ts';
import { getSource } from '../ingestion/sources.ts';
import { createLogger } from '../log.ts';
import { count } from '../status/format.ts';
import { parseCli, positiveIntFlag } from './args.ts';

const USAGE = `
Usage:
  bin/backfill FILE|HOUR... [--source ID] [--force] [--json]
  bin/backfill --gaps [--json]

Imports the PushEvents of GH Archive files into push_events, with their actors and
repositories (new ones pending for enrichment), exactly as polling would store them: a
push already held is not stored again, and a webhook copy gets its event id.

  FILE         a local .json.gz or .json file (NDJSON, one Events API object a line)
  HOUR         YYYY-MM-DD-H, GH Archive's file name (UTC, hour not zero-padded), fetched
               from GHARCHIVE_URL (default https://data.gharchive.org; a mirror, or
               file:///a/directory). A day: bin/backfill 2025-01-01-{0..23}
  --source ID  keep only the events source ID's feed lists (public: all; repo, org,
               user: theirs) and attribute the rows to it
  --force      read files already imported again (still adds only what is missing)
  --gaps       fill every open gap whose archive hours are published (table gaps)
  --json       print the results as JSON only

Idempotent and resumable: each file's progress is checkpointed in backfill_files, so a
second run adds nothing and a killed run resumes after its last committed chunk. Safe
beside a running worker. Archive downloads never spend GitHub API quota.

Exit codes: 0 every file imported (or imported before), every gap filled or waiting;
1 a file could not be read, a gap could not be filled, or the run was interrupted
(the rest is still imported; run it again to resume); 2 bad arguments or configuration.
`;

type Input = { kind: 'hour'; name: string } | { kind: 'file'; path: string };

function parseInputs(args: string[]): Input[] {
  return args.map((arg) => {
    const hour = parseHour(arg);
    if (hour) return { kind: 'hour', name: hour.name };
    if (/^\d{4}-\d{2}-\d{2}-\d+$/.test(arg)) {
      throw new UsageError(`"${arg}" is not a real hour (YYYY-MM-DD-H, H from 0 to 23)\n${USAGE}`);
    }
    if (!statSync(arg, { throwIfNoEntry: false })?.isFile()) {
      throw new UsageError(`"${arg}" is neither a file nor an hour YYYY-MM-DD-H\n${USAGE}`);
    }
    return { kind: 'file', path: arg };
  });
}

function sourceOf(app: App, input: Input): ByteSource {
  return input.kind === 'hour'
    ? archiveHourSource(app.config.archive.url, parseHour(input.name)!)
    : localFileSource(input.path);
}

function seconds(s: number): string {
  return s < 10 ? `${s.toFixed(1)} s` : `${Math.round(s)} s`;
}

export function formatImport(r: ImportResult): string {
  const name = r.file.includes('/') ? r.label : r.file;
  switch (r.outcome) {
    case 'already_imported':
      return `${name}: already imported (${count(r.totals.created)} pushes stored then); --force reads it again`;
    case 'busy':
      return `${name}: busy (another process is importing it)`;
    default: {
      const c = r.counts;
      const what = [
        `${count(c.events)} events`,
        `${count(c.pushes)} pushes`,
        ...(c.kept !== c.pushes ? [`${count(c.kept)} kept`] : []),
        `${count(c.created)} stored`,
        ...(c.malformed ? [`${count(c.malformed)} malformed lines set aside`] : []),
      ].join(', ');
      const resumed = r.resumedAt ? ` (resumed at line ${count(r.resumedAt + 1)})` : '';
      const error = r.error ? `: ${r.error.code}: ${r.error.message}` : '';
      const hint =
        r.outcome === 'completed'
          ? ''
          : '; run the same command again to resume from its checkpoint';
      return `${name}: ${r.outcome}${error}: ${what} in ${seconds(r.seconds)}${resumed}${hint}`;
    }
  }
}

function iso(d: Date): string {
  return d.toISOString().replace('.000Z', 'Z');
}

export function formatGap(r: GapFillResult): string {
  const head = `gap ${r.gapId} (source ${r.sourceId} ${r.source}, ${iso(r.fromAt)} … ${iso(r.toAt)})`;
  switch (r.outcome) {
    case 'filled':
      return `${head}: filled, ${count(r.eventsRecovered)} pushes recovered from ${r.hours.length} archive hours`;
    case 'waiting':
      return `${head}: waiting for the archive to publish its hours (after ${iso(r.nextAttemptAt!)})`;
    case 'busy':
      return `${head}: busy (another process is filling it)`;
    case 'not_open':
      return `${head}: no longer open`;
    case 'interrupted':
      return `${head}: interrupted (${count(r.eventsRecovered)} pushes recovered so far); run again to resume`;
    case 'unavailable':
      return `${head}: unavailable, ${count(r.eventsRecovered)} pushes recovered: ${r.error}`;
    case 'retry':
      return `${head}: not filled yet, ${count(r.eventsRecovered)} pushes recovered so far: ${r.error}; next try ${iso(r.nextAttemptAt!)}`;
  }
}

function mb(n: number): string {
  return (n / 1e6).toFixed(1);
}

function progressLine(p: ImportProgress, started: number, width = 24): string {
  const share = p.bytesTotal ? Math.min(1, p.bytesRead / p.bytesTotal) : null;
  const filled = share === null ? 0 : Math.round(share * width);
  const bar =
    share === null ? '?'.repeat(width) : `${'#'.repeat(filled)}${'.'.repeat(width - filled)}`;
  const elapsed = Math.max(0.001, (Date.now() - started) / 1000);
  const size = p.bytesTotal ? `${mb(p.bytesRead)}/${mb(p.bytesTotal)} MB` : `${mb(p.bytesRead)} MB`;
  const name = p.label.split('/').at(-1);
  return `[${bar}] ${name} ${share === null ? '' : `${Math.round(share * 100)}% `}${size}  ${count(p.lines)} lines  ${count(p.counts.created)} stored  ${count(Math.round(p.lines / elapsed))} lines/s`;
}

class Terminal {
  readonly tty: boolean;
  #started = Date.now();
  #drawn = false;
  constructor(json: boolean) {
    this.tty = !json && process.stdout.isTTY === true;
  }
  start(): void {
    this.#started = Date.now();
  }
  progress(p: ImportProgress): void {
    if (!this.tty) return;
    const cols = process.stdout.columns ?? 120;
    process.stdout.write(`\r${progressLine(p, this.#started).slice(0, cols - 1)}\u001b[K`);
    this.#drawn = true;
  }
  line(text: string): void {
    if (this.#drawn) process.stdout.write('\r\u001b[K');
    this.#drawn = false;
    process.stdout.write(`${text}\n`);
  }
}

async function runFiles(
  app: App,
  inputs: Input[],
  opts: { sourceId?: number; force: boolean; json: boolean; signal: AbortSignal },
): Promise<number> {
  let target: ImportTarget = { scope: 'all', sourceId: null, gapId: null };
  if (opts.sourceId !== undefined) {
    const source = await getSource(app.db, opts.sourceId);
    target = {
      scope: `source:${source.id}`,
      sourceId: Number(source.id),
      gapId: null,
      inScope: scopeOf(source, await knownRepoId(app.db, source)),
    };
  }
  const term = new Terminal(opts.json);
  const results: ImportResult[] = [];
  for (const input of inputs) {
    if (opts.signal.aborted) break;
    term.start();
    const r = await importFile(app, sourceOf(app, input), target, {
      force: opts.force,
      wait: true,
      signal: opts.signal,
      onProgress: (p) => term.progress(p),
    });
    results.push(r);
    if (!opts.json) term.line(formatImport(r));
  }
  const ok = (r: ImportResult) => r.outcome === 'completed' || r.outcome === 'already_imported';
  const created = results.reduce((n, r) => n + r.counts.created, 0);
  const summary = {
    files: inputs.length,
    completed: results.filter((r) => r.outcome === 'completed').length,
    alreadyImported: results.filter((r) => r.outcome === 'already_imported').length,
    failed: results.filter((r) => !ok(r)).length + (inputs.length - results.length),
    pushesStored: created,
  };
  if (opts.json) {
    process.stdout.write(`${JSON.stringify({ results, summary }, null, 2)}\n`);
  } else if (inputs.length > 1) {
    term.line(
      `backfill: ${summary.files} files: ${summary.completed} imported, ${summary.alreadyImported} already imported, ${summary.failed} not completed; ${count(created)} pushes stored`,
    );
  }
  return summary.failed > 0 ? 1 : 0;
}

async function runGaps(app: App, json: boolean, signal: AbortSignal): Promise<number> {
  const term = new Terminal(json);
  let filling = 0;
  const results = await fillGaps(app satisfies FillDeps, {
    ignoreBackoff: true,
    signal,
    onProgress: (gap, _hour, p) => {
      if (Number(gap.id) !== filling) {
        filling = Number(gap.id);
        term.start();
      }
      term.progress(p);
    },
    onGap: (r) => {
      if (!json) term.line(formatGap(r));
    },
  });
  if (json) process.stdout.write(`${JSON.stringify({ gaps: results }, null, 2)}\n`);
  else if (results.length === 0) term.line('no open gaps');
  const failed = results.some((r) => ['retry', 'unavailable', 'interrupted'].includes(r.outcome));
  return failed ? 1 : 0;
}

export async function main(argv: string[]): Promise<number> {
  const parsed = parseCli(
    argv,
    USAGE,
    {
      source: { type: 'string' },
      force: { type: 'boolean' },
      gaps: { type: 'boolean' },
      json: { type: 'boolean' },
    },
    { allowPositionals: true },
  );
  if (!parsed) return 0;
  const { values, positionals } = parsed;
  const json = values.json ?? false;
  if (values.gaps && (positionals.length > 0 || values.source || values.force)) {
    throw new UsageError(`--gaps takes no files, hours, --source or --force\n${USAGE}`);
  }
  if (!values.gaps && positionals.length === 0) {
    throw new UsageError(`give at least one FILE or HOUR, or --gaps\n${USAGE}`);
  }
  const sourceId = positiveIntFlag('source', values.source, USAGE);
  const inputs = values.gaps ? [] : parseInputs(positionals);

  const config = loadConfig();
  // Logs go to stderr: stdout is the command's own output (progress, lines, JSON).
  const logger = createLogger(config.logLevel, pino.destination({ fd: 2, sync: true }));
  const app = await createApp({ config, logger, role: 'backfill', poolMax: 3 });
  const abort = new AbortController();
  let signals = 0;
  const onSignal = () => {
    signals++;
    // A second signal: stop now. Every committed chunk is in the checkpoint already.
    if (signals > 1) process.exit(130);
    logger.info({ event: 'process.signal' }, 'stopping after the chunk in flight (again: now)');
    abort.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    if (values.gaps) return await runGaps(app, json, abort.signal);
    try {
      return await runFiles(app, inputs, {
        sourceId,
        force: values.force ?? false,
        json,
        signal: abort.signal,
      });
    } catch (err) {
      if (!(err instanceof NotFound)) throw err;
      process.stderr.write(`backfill: no source with id ${sourceId} (see bin/sources list)\n`);
      return 1;
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await app.close();
  }
}
