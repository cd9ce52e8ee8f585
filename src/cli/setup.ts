import { type App, createApp } from '../app.ts';
import { installQueues } from '../jobs/boss.ts';
import {
  checkStoredSettings,
  logRecorded,
  reconfigureStoredSettings,
  type SettingChange,
  STORED_SETTINGS,
  writerSessions,
} from '../platform/config/stored-settings.ts';
import { migrateToLatest, withSetupLock } from '../platform/db/migrate.ts';
import { installViews } from '../status/views.ts';
import { rewriteStoredAddresses } from '../store/rewrite-addresses.ts';
import { describeSource, seedSources } from '../store/sources.ts';
import { parseCli } from './args.ts';

const USAGE = `
Usage: bin/setup [--reconfigure]

Migrates the business schema, installs or migrates the pg-boss schema (PGBOSS_SCHEMA),
creates the queues and the psql views (ingest_overview, enrichment_backlog,
queue_overview), and seeds the sources listed in SOURCES (default: public).
Idempotent; two setups at once run one after the other (advisory lock). Prints what
it changed (stdout); logs at info only what changed.

It also records, once, the settings that shape stored data (${STORED_SETTINGS.map((s) => s.name).join(', ')}):
a process whose environment says otherwise refuses to start (exit 2), and so does
bin/setup itself.

  --reconfigure   make this environment's values of those settings the database's; rows
                  already stored keep the shape they have, except that a COMMIT_EMAILS
                  other than keep is applied to every address stored before (hashed or
                  dropped, batch by batch); restart every worker and web with the new
                  values afterwards
`;

interface SetupReport {
  migrations: string[];
  queuesCreated: string[];
  queuesUpdated: string[];
  sourcesAdded: string[];
  /** Stored-data settings recorded for the first time, or changed by --reconfigure. */
  settings: SettingChange[];
  /** Rows whose addresses --reconfigure put under the new COMMIT_EMAILS (null: none asked). */
  rewritten: number | null;
}

function changed(r: SetupReport): boolean {
  return (
    r.migrations.length +
      r.queuesCreated.length +
      r.queuesUpdated.length +
      r.sourcesAdded.length +
      r.settings.length >
    0
  );
}

function formatSetupReport(r: SetupReport): string {
  if (!changed(r)) return 'setup: nothing to do, the database is up to date';
  const parts = [
    r.migrations.length > 0 && `${r.migrations.length} migration(s) applied`,
    r.queuesCreated.length > 0 && `${r.queuesCreated.length} queue(s) created`,
    r.queuesUpdated.length > 0 && `${r.queuesUpdated.length} queue(s) updated`,
    r.sourcesAdded.length > 0 &&
      `${r.sourcesAdded.length} source(s) added (${r.sourcesAdded.join(', ')})`,
    r.settings.length > 0 &&
      `stored-data settings ${r.settings
        .map((c) => (c.from === null ? `${c.name}=${c.to}` : `${c.name} ${c.from} → ${c.to}`))
        .join(', ')}`,
    r.rewritten !== null && `addresses of ${r.rewritten} stored row(s) rewritten`,
  ].filter(Boolean);
  return `setup: ${parts.join(', ')}`;
}

/**
 * Everything bin/setup does, on an existing App (npm start runs it before the worker).
 * Each step logs at info when it changed something and at debug when it did not, so a
 * setup that finds everything in place says nothing at the default level.
 */
export async function runSetup(
  app: App,
  opts: { reconfigure?: boolean } = {},
): Promise<SetupReport> {
  const report = await withSetupLock(app.pool, async () => {
    const migrations = await migrateToLatest(app.db);
    app.logger[migrations.length > 0 ? 'info' : 'debug'](
      { event: 'setup.migrated', applied: migrations },
      `business schema: ${migrations.length} migration(s) applied`,
    );
    // Before anything else is touched: a setup whose environment disagrees with the
    // database's stored-data settings refuses (exit 2), as a worker would.
    const { settings, rewritten } = opts.reconfigure
      ? await reconfigure(app)
      : { settings: await checkStoredSettings(app.db, app.config, 'setup'), rewritten: null };
    if (!opts.reconfigure && settings.length > 0) logRecorded(app.logger, settings);
    const queues = await installQueues(app);
    // After the queue install: queue_overview reads the pg-boss schema. Recreated every
    // time from the same definitions, so not a change worth an info line.
    await installViews(app.db, app.config.pgbossSchema);
    app.logger.debug(
      { event: 'setup.views' },
      'views: ingest_overview, enrichment_backlog, queue_overview',
    );
    const seeded = (await seedSources(app.db, app.config)).map(describeSource);
    app.logger[seeded.length > 0 ? 'info' : 'debug'](
      { event: 'setup.sources_seeded', seeded },
      `sources: ${seeded.length} new${seeded.length > 0 ? ` (${seeded.join(', ')})` : ''}`,
    );
    return {
      migrations,
      queuesCreated: queues.created,
      queuesUpdated: queues.updated,
      sourcesAdded: seeded,
      settings,
      rewritten,
    };
  });
  // The steps above said what changed; bin/setup prints this summary as its result.
  app.logger.debug(
    { event: 'setup.completed', changed: changed(report) },
    formatSetupReport(report),
  );
  return report;
}

/**
 * --reconfigure: the changes, logged at warn (mixed rows from here on are on purpose). A
 * COMMIT_EMAILS other than `keep` that differs from the recorded one is first applied to
 * what was stored (no address the setting forbids stays anywhere), and recorded
 * only once that finished, so an interrupted reconfigure is run again whole.
 */
async function reconfigure(
  app: App,
): Promise<{ settings: SettingChange[]; rewritten: number | null }> {
  const emails = app.config.commits.emails;
  const recorded = await app.db
    .selectFrom('stored_settings')
    .select('value')
    .where('name', '=', 'COMMIT_EMAILS')
    .executeTakeFirst();
  const counts =
    emails !== 'keep' && recorded !== undefined && recorded.value !== emails
      ? await rewriteStoredAddresses(app.db, emails)
      : null;
  const rewritten = counts && Object.values(counts).reduce((a, b) => a + b, 0);
  const changes = await reconfigureStoredSettings(app.db, app.config, 'setup --reconfigure');
  if (changes.length === 0) return { settings: changes, rewritten };
  const sessions = await writerSessions(app.db);
  app.logger.warn(
    {
      event: 'setup.reconfigured',
      changes: changes.map((c) => ({ setting: c.name, from: c.from, to: c.to })),
      writer_sessions: sessions,
      ...(counts ? { rewritten: counts } : {}),
    },
    `stored-data settings changed: ${changes.map((c) => `${c.name} ${c.from ?? '(none)'} → ${c.to}`).join(', ')}; ${counts ? `addresses stored before put under COMMIT_EMAILS=${emails} (${rewritten} row(s)), other rows keep their shape` : 'rows stored before keep their shape'}${sessions > 0 ? `; ${sessions} database session(s) of a worker or web are connected: restart them with the new values` : ''}`,
  );
  return { settings: changes, rewritten };
}

export async function main(argv: string[]): Promise<number> {
  const cli = parseCli(argv, USAGE, { reconfigure: { type: 'boolean' } });
  if (!cli) return 0;
  const app = await createApp({ role: 'setup', poolMax: 3, requires: 'none' });
  try {
    const report = await runSetup(app, { reconfigure: cli.values.reconfigure ?? false });
    process.stdout.write(`${formatSetupReport(report)}\n`);
    return 0;
  } finally {
    await app.close();
  }
}
