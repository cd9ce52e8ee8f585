import { loadConfig } from '../platform/config/config.ts';
import {
  type EmbeddedStatus,
  embeddedStatus,
  type Holder,
  stopEmbedded,
} from '../platform/db/embedded-admin.ts';
import { UsageError } from '../platform/errors.ts';
import { quoted } from '../platform/quote.ts';
import { parseCli } from './args.ts';

const USAGE = `
Usage:
  bin/db status [--json]   is the embedded Postgres running; its URL, pid, version, log
                           file, and the processes using it
  bin/db stop [--force]    stop it now

The embedded Postgres is what every command uses when DATABASE_URL is unset: data in
DATA_DIR/postgres (default .data/postgres), 127.0.0.1:EMBEDDED_POSTGRES_PORT (default
54329). The first command starts it, the others join it, and it stops when the last of
them exits gracefully; one left running by a killed process is adopted by the next.

  --json   status as JSON
  --force  stop even while processes use it (they lose their connections and start it
           again at once: stop them first to keep it stopped). Without it, stop
           refuses and exits 1 while processes use it (listing them), and when the server
           does not answer who does

Exit codes: 0 ok (also "not running"); 1 in use, or an error; 2 bad arguments or
configuration.
`;

function holderList(holders: Holder[]): string {
  return holders.map((h) => `${h.role} (pid ${h.pid}, since ${h.since})`).join(', ');
}

export function formatStatus(s: EmbeddedStatus, databaseUrlSet: boolean): string[] {
  const lines: string[] = [];
  if (!s.running) {
    lines.push(
      `embedded Postgres: not running (${s.initialised ? 'data' : 'no data yet'} in ${s.dataDir})`,
    );
  } else {
    lines.push(
      `embedded Postgres: running, pid ${s.pid}${s.version ? `, PostgreSQL ${s.version}` : ''}${s.startedAt ? `, since ${s.startedAt}` : ''}`,
      `  url:     ${s.url}`,
      `  data:    ${s.dataDir}`,
      `  log:     ${s.log}`,
      s.holders.length > 0
        ? `  used by: ${holderList(s.holders)}`
        : '  used by: no process (left by one that was killed; the next command adopts it, bin/db stop stops it)',
    );
  }
  if (databaseUrlSet)
    lines.push('note: DATABASE_URL is set, so commands use that database, not this one');
  return lines;
}

export async function main(argv: string[]): Promise<number> {
  const parsed = parseCli(
    argv,
    USAGE,
    { json: { type: 'boolean' }, force: { type: 'boolean' } },
    { allowPositionals: true },
  );
  if (!parsed) return 0;
  const [command, ...rest] = parsed.positionals;
  if (rest.length > 0) throw new UsageError(`unexpected argument ${quoted(rest[0]!)}\n${USAGE}`);
  if (command === 'status' && parsed.values.force)
    throw new UsageError(`--force applies to "stop" only\n${USAGE}`);
  if (command === 'stop' && parsed.values.json)
    throw new UsageError(`--json applies to "status" only\n${USAGE}`);
  const config = loadConfig();
  switch (command) {
    case 'status': {
      const status = await embeddedStatus(config.dataDir);
      if (parsed.values.json) {
        process.stdout.write(
          `${JSON.stringify({ ...status, databaseUrlSet: Boolean(config.databaseUrl) }, null, 2)}\n`,
        );
      } else {
        for (const line of formatStatus(status, Boolean(config.databaseUrl)))
          process.stdout.write(`${line}\n`);
      }
      return 0;
    }
    case 'stop': {
      const r = await stopEmbedded(config.dataDir, parsed.values.force ?? false);
      switch (r.outcome) {
        case 'not_running':
          process.stdout.write('embedded Postgres is not running\n');
          return 0;
        case 'in_use':
          process.stderr.write(
            `db: the embedded Postgres is in use by ${holderList(r.holders) || 'a process that is joining it'}; stop them first, or use --force\n`,
          );
          return 1;
        case 'unknown_holders':
          process.stderr.write(
            `db: the embedded Postgres (pid ${r.pid}) is running, but cannot check who uses it: ${r.cause}; use --force to stop it anyway\n`,
          );
          return 1;
        case 'stopped':
          process.stdout.write(`embedded Postgres stopped (pid ${r.pid}, port ${r.port})\n`);
          return 0;
      }
      return 1;
    }
    case undefined:
      throw new UsageError(`missing command: status or stop\n${USAGE}`);
    default:
      throw new UsageError(`unknown command ${quoted(command)}\n${USAGE}`);
  }
}
