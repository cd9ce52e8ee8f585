import { type App, createApp } from '../app.ts';
import { deploymentCommits, NO_CREDENTIAL_IN_USE } from '../commits/deployment.ts';
import { InvalidSource, sourceSpec } from '../platform/config/source-spec.ts';
import type { EventSource } from '../platform/db/schema.ts';
import { NotFound, UsageError } from '../platform/errors.ts';
import { quoted } from '../platform/quote.ts';
import { daysAhead, untilText } from '../platform/time-text.ts';
import {
  addSource,
  describeSource,
  listSources,
  setSourceCommits,
  setSourceEnabled,
} from '../store/sources.ts';
import { parseCli } from './args.ts';
import { main as importMain } from './sources-import.ts';

const USAGE = `
Usage:
  bin/sources add public            the public timeline (GET /events)
  bin/sources add repo OWNER/NAME   one repository's events
  bin/sources add org ORG           an organization's public events
  bin/sources add user LOGIN        a user's public events
  bin/sources list [--json]         every source, with its schedule and last error
  bin/sources enable ID             poll it again (clears its failure backoff, due now)
  bin/sources disable ID            stop polling it (its data stays)
  bin/sources import FILE|-         many at once, one a line (see bin/sources import --help)
  bin/sources commits ID on|off     fetch the commits of the pushes it covers, or not (on
                                    by default for every kind; "on, no credential" in the
                                    list while no process of the deployment has a GitHub
                                    credential: the pushes wait for one)

KIND TARGET may also be one word, as SOURCES writes it: bin/sources add repo:OWNER/NAME.
Sources are added in this process's GITHUB_MODE (live unless GITHUB_MODE=fixture); a
process only polls sources of its own mode. Adding an existing source changes nothing.
Exit codes: 0 ok; 1 unknown source id or other error; 2 bad arguments or configuration.
`;

function usage(message: string): UsageError {
  return new UsageError(`${message}\n${USAGE}`);
}

function parseId(raw: string | undefined): number {
  if (raw === undefined) throw usage('missing source ID');
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < 1) {
    throw usage(`source ID must be a positive integer (got ${quoted(raw)})`);
  }
  return n;
}

function line(s: string): void {
  process.stdout.write(`${s}\n`);
}

/** "due", "in 45s", "in 12m", "in 3h" — when the next poll is; a day or more ahead, its date. */
function nextPollText(at: Date, now: Date): string {
  const s = Math.round((at.getTime() - now.getTime()) / 1000);
  if (s <= 0) return 'due';
  if (s < 120) return `in ${s}s`;
  if (s < 7200) return `in ${Math.round(s / 60)}m`;
  if (!daysAhead(at, now)) return `in ${Math.round(s / 3600)}h`;
  return untilText(at, now);
}

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows
    .map((r) =>
      r
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

function toJson(s: EventSource) {
  return {
    id: Number(s.id),
    kind: s.kind,
    target: s.target,
    mode: s.mode,
    enabled: s.enabled,
    next_poll_at: s.next_poll_at.toISOString(),
    poll_interval_seconds: s.poll_interval_seconds,
    consecutive_failures: s.consecutive_failures,
    last_polled_at: s.last_polled_at?.toISOString() ?? null,
    last_error: s.last_error,
    commits_enabled: s.commits_enabled,
  };
}

/**
 * The list as a table. `credentialInUse`: some process of the deployment used a GitHub
 * credential in the last hour; without one a source's commits are "on, no credential" —
 * on, and the pushes it covers wait for one.
 */
function printList(sources: EventSource[], credentialInUse: boolean): void {
  if (sources.length === 0) {
    line('no sources (add one with: bin/sources add public)');
    return;
  }
  const now = new Date();
  const header = [
    'ID',
    'KIND',
    'TARGET',
    'MODE',
    'ENABLED',
    'COMMITS',
    'NEXT POLL',
    'FAILURES',
    'LAST ERROR',
  ];
  const rows = sources.map((s) => [
    String(s.id),
    s.kind,
    s.target ?? '-',
    s.mode,
    s.enabled ? 'yes' : 'no',
    s.commits_enabled ? (credentialInUse ? 'on' : 'on, no credential') : 'off',
    s.enabled ? nextPollText(s.next_poll_at, now) : '-',
    String(s.consecutive_failures),
    s.last_error
      ? s.last_error.length > 60
        ? `${s.last_error.slice(0, 57)}...`
        : s.last_error
      : '-',
  ]);
  line(table([header, ...rows]));
}

async function withApp<T>(fn: (app: App) => Promise<T>): Promise<T> {
  const app = await createApp({ role: 'sources', poolMax: 2 });
  try {
    return await fn(app);
  } finally {
    await app.close();
  }
}

export async function main(argv: string[]): Promise<number> {
  // import has flags of its own: its module parses them (src/cli/sources-import.ts).
  if (argv[0] === 'import') return importMain(argv.slice(1));
  const parsed = parseCli(argv, USAGE, { json: { type: 'boolean' } }, { allowPositionals: true });
  if (!parsed) return 0;
  const [command, ...rest] = parsed.positionals;
  const json = parsed.values.json ?? false;
  if (json && command !== 'list') throw usage('--json applies to "list" only');

  switch (command) {
    case 'add': {
      // `repo OWNER/NAME`, or one word as SOURCES and `list` write it: `repo:OWNER/NAME`.
      const [first, second, ...extra] = rest;
      const colon = second === undefined ? (first?.indexOf(':') ?? -1) : -1;
      const [kind, target] =
        colon > 0 ? [first!.slice(0, colon), first!.slice(colon + 1)] : [first, second];
      if (kind === undefined) throw usage('add needs a kind: public, repo, org or user');
      if (extra.length > 0) throw usage(`unexpected argument ${quoted(extra[0]!)}`);
      let spec: ReturnType<typeof sourceSpec>;
      try {
        spec = sourceSpec(kind, target);
      } catch (err) {
        if (err instanceof InvalidSource) throw usage(err.message);
        throw err;
      }
      return withApp(async (app) => {
        const { source, created } = await addSource(app.db, spec, app.config.github.mode);
        line(
          created
            ? `added source ${source.id}: ${describeSource(source)} (${source.mode})`
            : `source ${source.id} already exists: ${describeSource(source)} (${source.mode})`,
        );
        return 0;
      });
    }
    case 'list': {
      if (rest.length > 0) throw usage(`unexpected argument ${quoted(rest[0]!)}`);
      return withApp(async (app) => {
        const sources = await listSources(app.db);
        if (json) line(JSON.stringify(sources.map(toJson), null, 2));
        else printList(sources, (await deploymentCommits(app.db, new Date())).credentialInUse);
        return 0;
      });
    }
    case 'enable':
    case 'disable': {
      if (rest.length > 1) throw usage(`unexpected argument ${quoted(rest[1]!)}`);
      const id = parseId(rest[0]);
      return withApp(async (app) => {
        try {
          const source = await setSourceEnabled(app.db, id, command === 'enable');
          line(`source ${source.id} ${command}d: ${describeSource(source)} (${source.mode})`);
          return 0;
        } catch (err) {
          if (!(err instanceof NotFound)) throw err;
          process.stderr.write(`sources: no source with id ${id} (see bin/sources list)\n`);
          return 1;
        }
      });
    }
    case 'commits': {
      if (rest.length > 2) throw usage(`unexpected argument "${rest[2]}"`);
      const id = parseId(rest[0]);
      const setting = rest[1];
      if (setting !== 'on' && setting !== 'off') {
        throw usage(
          setting === undefined
            ? 'commits needs on or off'
            : `commits takes on or off (got "${setting}")`,
        );
      }
      return withApp(async (app) => {
        try {
          const source = await setSourceCommits(app.db, id, setting === 'on');
          line(
            `source ${source.id} commits ${setting}: ${describeSource(source)} (${source.mode}); applies to pushes stored from now on`,
          );
          // On, yet nobody's commits are fetched while the deployment has no credential: say so.
          if (setting === 'on') {
            const d = await deploymentCommits(app.db, new Date());
            if (!d.credentialInUse) {
              process.stderr.write(
                `sources: commits are not fetched yet: ${NO_CREDENTIAL_IN_USE}\n`,
              );
            }
          }
          return 0;
        } catch (err) {
          if (!(err instanceof NotFound)) throw err;
          process.stderr.write(`sources: no source with id ${id} (see bin/sources list)\n`);
          return 1;
        }
      });
    }
    case undefined:
      throw usage('missing command');
    default:
      throw usage(`unknown command ${quoted(command)}`);
  }
}
