import { type App, createApp } from '../app.ts';
import { migrateToLatest, withSetupLock } from '../db/migrate.ts';
import { describeSource, seedSources } from '../ingestion/sources.ts';
import { installQueues } from '../queue/boss.ts';
import { installViews } from '../status/views.ts';
import { parseCli } from './args.ts';

const USAGE = `
Usage: bin/setup

Migrates the business schema, installs or migrates the pg-boss schema (PGBOSS_SCHEMA),
creates the queues and the psql views (ingest_overview, enrichment_backlog,
queue_overview), and seeds the sources listed in SOURCES (default: public).
Idempotent; two setups at once run one after the other (advisory lock). Prints what
it changed (stdout); logs at info only what changed.
`;

interface SetupReport {
  migrations: string[];
  queuesCreated: string[];
  queuesUpdated: string[];
  sourcesAdded: string[];
}

function changed(r: SetupReport): boolean {
  return (
    r.migrations.length + r.queuesCreated.length + r.queuesUpdated.length + r.sourcesAdded.length >
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
  ].filter(Boolean);
  return `setup: ${parts.join(', ')}`;
}

/**
 * Everything bin/setup does, on an existing App (npm start runs it before the worker).
 * Each step logs at info when it changed something and at debug when it did not, so a
 * setup that finds everything in place says nothing at the default level.
 */
export async function runSetup(app: App): Promise<SetupReport> {
  const report = await withSetupLock(app.pool, async () => {
    const migrations = await migrateToLatest(app.db);
    app.logger[migrations.length > 0 ? 'info' : 'debug'](
      { event: 'setup.migrated', applied: migrations },
      `business schema: ${migrations.length} migration(s) applied`,
    );
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
    };
  });
  // The steps above said what changed; bin/setup prints this summary as its result.
  app.logger.debug(
    { event: 'setup.completed', changed: changed(report) },
    formatSetupReport(report),
  );
  return report;
}

export async function main(argv: string[]): Promise<number> {
  if (!parseCli(argv, USAGE, {})) return 0;
  const app = await createApp({ role: 'setup', poolMax: 3, requires: 'none' });
  try {
    const report = await runSetup(app);
    process.stdout.write(`${formatSetupReport(report)}\n`);
    return 0;
  } finally {
    await app.close();
  }
}
