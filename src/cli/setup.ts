import { type App, createApp } from '../app.ts';
import { migrateToLatest, withSetupLock } from '../db/migrate.ts';
import { seedSources } from '../ingestion/sources.ts';
import { installQueues } from '../queue/boss.ts';
import { installViews } from '../status/views.ts';
import { parseCli } from './args.ts';

const USAGE = `
Usage: bin/setup

Migrates the business schema, installs or migrates the pg-boss schema (PGBOSS_SCHEMA),
creates the queues and the psql views (ingest_overview, enrichment_backlog,
queue_overview), and seeds the sources listed in SOURCES (default: public).
Idempotent; two setups at once run one after the other (advisory lock).
`;

/** Everything bin/setup does, on an existing App (npm start runs it before the worker). */
export async function runSetup(app: App): Promise<void> {
  await withSetupLock(app.pool, async () => {
    const applied = await migrateToLatest(app.db);
    app.logger.info(
      { event: 'setup.migrated', applied },
      `business schema: ${applied.length} migration(s) applied`,
    );
    await installQueues(app);
    // After the queue install: queue_overview reads the pg-boss schema.
    await installViews(app.db, app.config.pgbossSchema);
    app.logger.info(
      { event: 'setup.views' },
      'views: ingest_overview, enrichment_backlog, queue_overview',
    );
    const seeded = await seedSources(app.db, app.config);
    app.logger.info({ event: 'setup.sources_seeded', seeded }, `sources: ${seeded.length} new`);
  });
  app.logger.info({ event: 'setup.completed' }, 'setup completed');
}

export async function main(argv: string[]): Promise<number> {
  if (!parseCli(argv, USAGE, {})) return 0;
  const app = await createApp({ role: 'setup', poolMax: 3 });
  try {
    await runSetup(app);
    return 0;
  } finally {
    await app.close();
  }
}
