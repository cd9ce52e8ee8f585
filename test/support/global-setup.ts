import type { TestProject } from 'vitest/node';
import { adminQuery, startTestServer, withDatabase } from './postgres-server.ts';
import { prepareTemplate } from './template.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    testDb: { adminUrl: string; template: string; runId: string };
  }
}

/**
 * gpi_<run start, epoch seconds base 36>_[<pid base 36>_]<tpl | 8 hex | empty_6 hex | bench>:
 * the template, a file's database, a scratch or empty database, or the bench's.
 */
export const HARNESS_DATABASE =
  /^gpi_([0-9a-z]{6,7})_(?:[0-9a-z]+_)?(?:tpl|bench|[0-9a-f]{8}|empty_[0-9a-f]{6})$/;

/** One server and one migrated template per `vitest run`; each test file clones it. */
export default async function setup(project: TestProject) {
  const server = await startTestServer();
  process.stderr.write(`tests use: ${server.description}\n`);
  // Names carry the run's start (epoch seconds, base 36) so that leftovers of runs killed
  // before their teardown can be dropped without touching a concurrent run's databases.
  const startedAt = Math.floor(Date.now() / 1000);
  const runId = `${startedAt.toString(36)}_${process.pid.toString(36)}`;
  const template = `gpi_${runId}_tpl`;
  const existing = await adminQuery(
    server.adminUrl,
    `SELECT datname FROM pg_database WHERE datname LIKE 'gpi\\_%'`,
  );
  for (const { datname } of existing.rows as { datname: string }[]) {
    // Only names this harness (and the bench) make: a database of someone else's that merely
    // starts with gpi_ on the same server is never touched.
    const stamp = HARNESS_DATABASE.exec(datname)?.[1];
    if (stamp === undefined) continue;
    const born = Number.parseInt(stamp, 36);
    if (Number.isFinite(born) && startedAt - born > 3 * 3600) {
      await adminQuery(server.adminUrl, `DROP DATABASE IF EXISTS "${datname}" WITH (FORCE)`).catch(
        () => {},
      );
    }
  }
  await adminQuery(server.adminUrl, `CREATE DATABASE ${template}`);
  await prepareTemplate(withDatabase(server.adminUrl, template));
  project.provide('testDb', { adminUrl: server.adminUrl, template, runId });
  return async () => {
    await adminQuery(server.adminUrl, `DROP DATABASE IF EXISTS ${template} WITH (FORCE)`);
    await server.stop();
  };
}
