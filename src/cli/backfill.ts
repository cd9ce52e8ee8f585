import { statSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { DatabaseNotSetUp } from '../platform/db/setup-state.ts';
import { AppError, ConfigError, UsageError } from '../platform/errors.ts';
import { terminal } from '../platform/terminal.ts';
import { hourCheck, parseHour } from '../store/archive-hours.ts';
import { parseCli, positiveIntFlag } from './args.ts';
import type { BackfillCommand, Input } from './backfill-command.ts';
import type { WorkerMessage } from './backfill-worker.ts';

const USAGE = `
Usage:
  bin/backfill FILE|HOUR... [--source ID] [--mirror URL|all] [--force] [--json]
  bin/backfill --gaps [--json]

Imports the PushEvents of GH Archive files into push_events, with their actors and
repositories (new ones pending for enrichment), exactly as polling would store them: a
push already held is not stored again, and a webhook copy gets its event id.

  FILE         a local .json.gz or .json file (NDJSON, one Events API object a line)
  HOUR         YYYY-MM-DD-H, GH Archive's file name (UTC; a zero-padded hour is that hour,
               fetched by GH Archive's name: 2025-01-01-08 as 2025-01-01-8), fetched
               from GHARCHIVE_URL (default https://data.gharchive.org; a mirror, or
               file:///a/directory). A day: bin/backfill 2025-01-01-{0..23}
  --source ID  keep only the events source ID's feed lists (public: all; repo, org,
               user: theirs) and attribute the rows to it
  --mirror M   read each HOUR from mirror M (an http(s) URL or file:// directory) or
               from every GHARCHIVE_URL entry (all); default the first entry. Each
               mirror has its own checkpoint: a second run per mirror adds nothing
  --force      read files already imported again (still adds only what is missing)
  --gaps       fill every open gap whose archive hours are published (table gaps)
  --json       print the results as JSON only

Idempotent and resumable: each file's progress is checkpointed in backfill_files, so a
second run adds nothing and a killed run resumes after its last committed chunk. Safe
beside a running worker. Archive downloads never spend GitHub API quota.

An hour in the future, or not over yet, is refused (nothing is fetched); one before GH
Archive's first hour (2011-02-12-0) is fetched with a warning. A file whose import died
twice (killed, or out of memory) is not read again without --force.

Exit codes: 0 every file imported (or imported before), every gap filled or waiting;
1 a file could not be read, a gap could not be filled, or the run was interrupted
(the rest is still imported; run it again to resume); 2 bad arguments (an hour in the
future) or configuration.
`;

function parseInputs(args: string[], now: Date, mirror: string | undefined): Input[] {
  const where =
    mirror === undefined
      ? undefined
      : mirror === 'all'
        ? 'every mirror in GHARCHIVE_URL'
        : shownUrl(mirror);
  return args.map((arg) => {
    const hour = parseHour(arg);
    if (hour) {
      const check = hourCheck(hour, now, where);
      if (check && 'refuse' in check) throw new UsageError(check.refuse);
      if (check) terminal.write(process.stderr, `backfill: warning: ${check.warn}\n`);
      return { kind: 'hour', name: hour.name };
    }
    if (/^\d{4}-\d{2}-\d{2}-\d+$/.test(arg)) {
      throw new UsageError(`"${arg}" is not a real hour (YYYY-MM-DD-H, H from 0 to 23)\n${USAGE}`);
    }
    if (!statSync(arg, { throwIfNoEntry: false })?.isFile()) {
      throw new UsageError(`"${arg}" is neither a file nor an hour YYYY-MM-DD-H\n${USAGE}`);
    }
    return { kind: 'file', path: arg };
  });
}

/** A mirror's URL as it may be printed: never its user name or password. */
function shownUrl(raw: string): string {
  const u = new URL(raw);
  u.username = '';
  u.password = '';
  return u.toString();
}

/** --mirror: 'all', or one mirror as GHARCHIVE_URL takes them (http(s) or file://). */
function mirrorFlag(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === 'all') return raw;
  let ok = false;
  try {
    ok = ['http:', 'https:', 'file:'].includes(new URL(raw).protocol);
  } catch {}
  if (!ok) {
    const shown = raw.length > 80 ? `${raw.slice(0, 80)}…` : raw;
    throw new UsageError(
      `--mirror must be all, an http(s) URL or a file:// directory (got "${shown}")\n${USAGE}`,
    );
  }
  return raw.replace(/\/+$/, '');
}

/**
 * The import runs in a worker thread whose heap is capped: V8 sizes a heap by the machine
 * (gigabytes here) and would let garbage pile up far past what the import holds, while a
 * capped heap collects it — an import of any size stays within ~250 MB of RSS
 * (docs/performance.md). The main thread only parses arguments, relays signals and draws
 * the terminal; it never loads the database or archive code.
 */
const RESOURCE_LIMITS = { maxOldGenerationSizeMb: 96, maxYoungGenerationSizeMb: 16 };

export async function main(argv: string[]): Promise<number> {
  const parsed = parseCli(
    argv,
    USAGE,
    {
      source: { type: 'string' },
      force: { type: 'boolean' },
      mirror: { type: 'string' },
      gaps: { type: 'boolean' },
      json: { type: 'boolean' },
    },
    { allowPositionals: true },
  );
  if (!parsed) return 0;
  const { values, positionals } = parsed;
  if (values.gaps && (positionals.length > 0 || values.source || values.force || values.mirror)) {
    throw new UsageError(`--gaps takes no files, hours, --source, --mirror or --force\n${USAGE}`);
  }
  if (!values.gaps && positionals.length === 0) {
    throw new UsageError(`give at least one FILE or HOUR, or --gaps\n${USAGE}`);
  }
  const mirror = mirrorFlag(values.mirror);
  const command: BackfillCommand = {
    inputs: values.gaps ? [] : parseInputs(positionals, new Date(), mirror),
    gaps: values.gaps ?? false,
    sourceId: positiveIntFlag('source', values.source, USAGE),
    force: values.force ?? false,
    json: values.json ?? false,
    mirror,
  };
  // The bar is progress, not a result: stderr's last line, a terminal only (src/platform/terminal.ts).
  const tty = !command.json && process.stderr.isTTY === true;
  const worker = new Worker(new URL('./backfill-worker.ts', import.meta.url), {
    workerData: {
      command,
      tty,
      stderr: { isTTY: process.stderr.isTTY === true, columns: process.stderr.columns },
    },
    resourceLimits: RESOURCE_LIMITS,
  });
  let signals = 0;
  const onSignal = () => {
    signals++;
    // A second signal: stop now. Every committed chunk is in its checkpoint already.
    if (signals > 1) process.exit(130);
    terminal.write(process.stderr, 'backfill: stopping after the chunk in flight (again: now)\n');
    worker.postMessage({ type: 'stop' });
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    return await new Promise<number>((resolve, reject) => {
      let failure: Error | null = null;
      let code: number | null = null;
      worker.on('message', (m: WorkerMessage) => {
        switch (m.type) {
          case 'line':
            // A result line ends its file's bar; the next file's progress draws a new one.
            terminal.clearStatus();
            terminal.write(process.stdout, `${m.text}\n`);
            break;
          case 'progress':
            terminal.setStatus(process.stderr, m.text);
            break;
          case 'log':
            terminal.write(process.stderr, m.text);
            break;
          case 'error-line':
            terminal.write(process.stderr, `${m.text}\n`);
            break;
          case 'done':
            code = m.code;
            // The work is committed and reported; a thread that does not end on its own
            // (a handle left open) must not keep the command from exiting.
            setTimeout(() => void worker.terminate(), 10_000).unref();
            break;
          case 'failed':
            // Back to the error classes runMain knows how to say (exit 2, "not set up"…).
            failure =
              m.variable !== undefined
                ? new ConfigError(m.variable, m.message.slice(m.variable.length + 1))
                : m.code === 'DATABASE_NOT_SET_UP'
                  ? Object.assign(new DatabaseNotSetUp(), { message: m.message })
                  : Object.assign(new AppError(m.code ?? 'ERROR', m.message), { name: m.name });
            break;
        }
      });
      worker.on('error', (err: Error & { code?: string }) => {
        failure =
          err.code === 'ERR_WORKER_OUT_OF_MEMORY'
            ? new AppError(
                'OUT_OF_MEMORY',
                'the import outgrew its memory budget; every committed chunk is kept: run the same command again to resume',
              )
            : err;
      });
      worker.on('exit', () => {
        terminal.clearStatus();
        if (failure) reject(failure);
        else resolve(code ?? 1);
      });
    });
  } finally {
    terminal.clearStatus();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
