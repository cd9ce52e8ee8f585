import type pino from 'pino';
import { type App, createApp } from '../app.ts';
import {
  archiveHourSource,
  type ByteSource,
  downloadOptions,
  localFileSource,
} from '../backfill/archive.ts';
import { scopeOf } from '../backfill/events.ts';
import { type FillDeps, fillGaps, type GapFillResult } from '../backfill/fill.ts';
import { knownRepoId } from '../backfill/gaps.ts';
import { importFile } from '../backfill/import.ts';
import type { ImportProgress, ImportResult, ImportTarget } from '../backfill/import-types.ts';
import { loadConfig } from '../platform/config/config.ts';
import { NotFound } from '../platform/errors.ts';
import { createLogger } from '../platform/log.ts';
import { bar } from '../platform/terminal.ts';
import { count } from '../status/format.ts';
import { parseHour } from '../store/archive-hours.ts';
import { getSource } from '../store/sources.ts';

/**
 * What bin/backfill does once its arguments are checked. It runs in a worker thread with
 * a bounded heap (src/cli/backfill.ts, src/cli/backfill-worker.ts), so an import of
 * any size stays within its memory budget; its output goes through CommandIO to the main
 * thread, which owns the terminal.
 */

export type Input = { kind: 'hour'; name: string } | { kind: 'file'; path: string };

export interface BackfillCommand {
  inputs: Input[];
  gaps: boolean;
  sourceId?: number;
  force: boolean;
  json: boolean;
  /** HOUR's mirror: a URL, or 'all' (every GHARCHIVE_URL entry); default the first entry. */
  mirror?: string;
}

/** The mirrors an HOUR is read from (--mirror): checkpoints are per mirror. */
function mirrorsOf(app: App, mirror: string | undefined): readonly string[] {
  if (mirror === 'all') return app.config.archive.mirrors;
  return [mirror ?? app.config.archive.url];
}

function sourcesOf(app: App, input: Input, mirror: string | undefined): ByteSource[] {
  if (input.kind === 'file') return [localFileSource(input.path)];
  const http = downloadOptions(app.config);
  return mirrorsOf(app, mirror).map((m) => archiveHourSource(m, parseHour(input.name)!, http));
}

function seconds(s: number): string {
  return s < 10 ? `${s.toFixed(1)} s` : `${Math.round(s)} s`;
}

/** Lines rejected; when past the sample, how many rejected_events kept and how many were only counted. */
function rejectedText(malformed: number, kept: number): string {
  const all = `${count(malformed)} malformed lines set aside`;
  if (kept >= malformed) return all;
  return `${all} (${count(kept)} kept in rejected_events, ${count(malformed - kept)} counted only)`;
}

function formatImport(r: ImportResult, mirrorShown: boolean): string {
  const name = r.file.includes('/') || mirrorShown ? r.label : r.file;
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
        ...(c.malformed ? [rejectedText(c.malformed, r.quarantined)] : []),
      ].join(', ');
      const resumed = r.resumedAt ? ` (resumed at line ${count(r.resumedAt + 1)})` : '';
      const error = r.error ? `: ${r.error.code}: ${r.error.message}` : '';
      const hint = r.outcome === 'completed' ? '' : nextStep(r.error?.code);
      return `${name}: ${r.outcome}${error}: ${what} in ${seconds(r.seconds)}${resumed}${hint}`;
    }
  }
}

/**
 * What to do about an import that did not complete, by its error: run it again when a run
 * again can go further (a cut download, an outage, an interruption); otherwise say why not.
 */
function nextStep(code: string | undefined): string {
  switch (code) {
    // It says itself how to read it again (--force).
    case 'BACKFILL_KILLED_IMPORTER':
      return '';
    case 'ARCHIVE_NOT_GZIP':
      return '; running it again reads the same page: check the mirror in GHARCHIVE_URL (or --mirror)';
    case 'ARCHIVE_HOUR_OPEN':
      return '; the mirror is still writing this hour (another instance importing it, a gap it has not filled, or an hour just ended): what it served is stored; run the same command again later to read it once it is final';
    // The mirror did not answer usefully (unreachable, 5xx, too slow): the error says what to
    // check; running again resumes, but only once the mirror answers.
    case 'ARCHIVE_UNAVAILABLE':
      return '; once the mirror answers, run the same command again to resume from its checkpoint';
    case 'ARCHIVE_HOUR_MISSING':
      return '; this mirror has no file for the hour (GH Archive publishes an hour about an hour after it ends, and lacks some for good): try another mirror (--mirror URL or --mirror all), or later';
    default:
      return '; run the same command again to resume from its checkpoint';
  }
}

function iso(d: Date): string {
  return d.toISOString().replace('.000Z', 'Z');
}

function formatGap(r: GapFillResult): string {
  const head = `gap ${r.gapId} (source ${r.sourceId} ${r.source}, ${iso(r.fromAt)} … ${iso(r.toAt)})`;
  switch (r.outcome) {
    case 'filled':
      return `${head}: filled, ${count(r.eventsRecovered)} pushes recovered from ${new Set(r.hours.map((h) => h.hour)).size} archive hours`;
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
    case 'mirror_retried': {
      const h = r.hours[0]!;
      const what =
        h.outcome === 'completed' || h.outcome === 'already_imported'
          ? `read, ${count(h.created)} pushes added`
          : `still not read (${h.error ?? h.outcome})`;
      return `${head}: filled; ${h.mirror} asked again for ${h.hour}: ${what}; ${count(r.eventsRecovered)} pushes recovered in all`;
    }
  }
}

/** Per mirror, the gap's hours: read, missing, failed, and the pushes each added. */
function formatMirrors(r: GapFillResult): string[] {
  const by = new Map<
    string,
    { read: number; missing: number; failed: number; open: number; added: number }
  >();
  for (const m of r.mirrors) {
    const t = by.get(m.mirror) ?? { read: 0, missing: 0, failed: 0, open: 0, added: 0 };
    if (m.state === 'imported') t.read++;
    else if (m.state === 'missing') t.missing++;
    else if (m.state === 'open') t.open++;
    else t.failed++;
    t.added += m.pushesAdded;
    by.set(m.mirror, t);
  }
  return [...by].map(
    ([mirror, t]) =>
      `  ${mirror || '(default)'}: ${t.read} hours read, ${t.missing} missing, ${t.failed} failed${t.open ? `, ${t.open} still open there` : ''}; ${count(t.added)} pushes added`,
  );
}

function mb(n: number): string {
  return (n / 1e6).toFixed(1);
}

function progressLine(p: ImportProgress, started: number): string {
  const share = p.bytesTotal ? Math.min(1, p.bytesRead / p.bytesTotal) : null;
  const elapsed = Math.max(0.001, (Date.now() - started) / 1000);
  const size = p.bytesTotal ? `${mb(p.bytesRead)}/${mb(p.bytesTotal)} MB` : `${mb(p.bytesRead)} MB`;
  const name = p.label.split('/').at(-1);
  return `${bar(share)} ${name} ${share === null ? '' : `${Math.round(share * 100)}% `}${size}  ${count(p.lines)} lines  ${count(p.counts.created)} stored  ${count(Math.round(p.lines / elapsed))} lines/s`;
}

/**
 * Where the command's output goes; the main thread owns the terminal (src/cli/backfill.ts,
 * src/platform/terminal.ts): results on stdout, the progress bar on stderr's last line, log lines
 * above it.
 */
export interface CommandIO {
  /** Draw progress (stderr is a terminal, and not --json). */
  tty: boolean;
  /** One line of output (stdout). */
  line(text: string): void;
  /** Replace the progress bar. */
  progress(text: string): void;
  /** A message for stderr. */
  error(text: string): void;
  /** Where log lines go (stderr, through the main thread's terminal). */
  logs: pino.DestinationStream;
}

class Terminal {
  readonly #io: CommandIO;
  readonly #tty: boolean;
  #started = Date.now();
  constructor(io: CommandIO, json: boolean) {
    this.#io = io;
    this.#tty = io.tty && !json;
  }
  start(): void {
    this.#started = Date.now();
  }
  progress(p: ImportProgress): void {
    if (this.#tty) this.#io.progress(progressLine(p, this.#started));
  }
  line(text: string): void {
    this.#io.line(text);
  }
}

async function runFiles(
  app: App,
  io: CommandIO,
  inputs: Input[],
  opts: {
    sourceId?: number;
    force: boolean;
    json: boolean;
    signal: AbortSignal;
    mirror?: string;
  },
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
  const term = new Terminal(io, opts.json);
  const results: ImportResult[] = [];
  const sources = inputs.flatMap((input) => sourcesOf(app, input, opts.mirror));
  const mirrorShown = opts.mirror !== undefined;
  for (const source of sources) {
    if (opts.signal.aborted) break;
    term.start();
    const r = await importFile(app, source, target, {
      force: opts.force,
      wait: true,
      signal: opts.signal,
      onProgress: (p) => term.progress(p),
    });
    results.push(r);
    if (!opts.json) term.line(formatImport(r, mirrorShown));
  }
  const ok = (r: ImportResult) => r.outcome === 'completed' || r.outcome === 'already_imported';
  const created = results.reduce((n, r) => n + r.counts.created, 0);
  const summary = {
    files: sources.length,
    completed: results.filter((r) => r.outcome === 'completed').length,
    alreadyImported: results.filter((r) => r.outcome === 'already_imported').length,
    failed: results.filter((r) => !ok(r)).length + (sources.length - results.length),
    pushesStored: created,
  };
  if (opts.json) {
    io.line(JSON.stringify({ results, summary }, null, 2));
  } else if (sources.length > 1) {
    term.line(
      `backfill: ${summary.files} files: ${summary.completed} imported, ${summary.alreadyImported} already imported, ${summary.failed} not completed; ${count(created)} pushes stored`,
    );
  }
  return summary.failed > 0 ? 1 : 0;
}

async function runGaps(
  app: App,
  io: CommandIO,
  json: boolean,
  signal: AbortSignal,
): Promise<number> {
  const term = new Terminal(io, json);
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
      if (json) return;
      term.line(formatGap(r));
      if (r.outcome !== 'mirror_retried' && new Set(r.mirrors.map((m) => m.mirror)).size > 1) {
        for (const line of formatMirrors(r)) term.line(line);
      }
    },
  });
  if (json) io.line(JSON.stringify({ gaps: results }, null, 2));
  else if (results.length === 0) term.line('no open gaps');
  const failed = results.some((r) => ['retry', 'unavailable', 'interrupted'].includes(r.outcome));
  return failed ? 1 : 0;
}

/** Runs the command; returns its exit code. */
export async function runBackfill(
  command: BackfillCommand,
  io: CommandIO,
  signal: AbortSignal,
): Promise<number> {
  const config = loadConfig();
  const logger = createLogger(config.logLevel, io.logs);
  // Three sessions: the import's (its lock, stage and merges), its entity inserts, and the
  // small reads around them.
  const app = await createApp({
    config,
    logger,
    role: 'backfill',
    poolMax: 3,
    writesStoredData: true,
  });
  try {
    if (command.gaps) return await runGaps(app, io, command.json, signal);
    try {
      return await runFiles(app, io, command.inputs, {
        sourceId: command.sourceId,
        force: command.force,
        json: command.json,
        signal,
        mirror: command.mirror,
      });
    } catch (err) {
      if (!(err instanceof NotFound)) throw err;
      io.error(`backfill: no source with id ${command.sourceId} (see bin/sources list)`);
      return 1;
    }
  } finally {
    await app.close();
  }
}
