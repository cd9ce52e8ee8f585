import type { TestProject } from 'vitest/node';
import { adminQuery, startTestServer, withDatabase } from './postgres-server.ts';
import { prepareTemplate } from './template.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    testDb: { adminUrl: string; template: string; runId: string };
  }
}

/** One server and one migrated template per `vitest run`; each test file clones it. */
export default async function setup(project: TestProject) {
  const server = await startTestServer();
  const runId = `${process.pid.toString(36)}${Date.now().toString(36).slice(-4)}`;
  const template = `gpi_tpl_${runId}`;
  // Leftovers of runs that were killed before their teardown.
  const stale = await adminQuery(
    server.adminUrl,
    `SELECT datname FROM pg_database WHERE datname LIKE 'gpi\\_%' AND datname NOT IN (
       SELECT DISTINCT datname FROM pg_stat_activity WHERE datname IS NOT NULL)`,
  );
  for (const { datname } of stale.rows) {
    await adminQuery(server.adminUrl, `DROP DATABASE IF EXISTS "${datname}" WITH (FORCE)`).catch(() => {});
  }
  await adminQuery(server.adminUrl, `CREATE DATABASE ${template}`);
  await prepareTemplate(withDatabase(server.adminUrl, template));
  project.provide('testDb', { adminUrl: server.adminUrl, template, runId });
  return async () => {
    await adminQuery(server.adminUrl, `DROP DATABASE IF EXISTS ${template} WITH (FORCE)`);
    await server.stop();
  };
}
