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
    const born = Number.parseInt(datname.split('_')[1] ?? '', 36);
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
