import { existsSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import pg from 'pg';
import { startEmbeddedPostgres } from '../../src/db/embedded.ts';

/**
 * Where the tests' Postgres comes from, in DESIGN §8 order:
 * TEST_DATABASE_URL if set, else a testcontainers Postgres when a Docker engine
 * answers, else an embedded Postgres under .data/test-postgres.
 */
export interface TestServer {
  /** A URL to a maintenance database (we CREATE/DROP databases through it). */
  adminUrl: string;
  kind: 'env' | 'testcontainers' | 'embedded';
  stop(): Promise<void>;
}

function dockerAnswers(): Promise<boolean> {
  const socket = process.env.DOCKER_HOST?.startsWith('unix://')
    ? process.env.DOCKER_HOST.slice(7)
    : '/var/run/docker.sock';
  if (!existsSync(socket)) return Promise.resolve(false);
  return new Promise((resolve) => {
    const s = net.connect(socket);
    const timer = setTimeout(() => {
      s.destroy();
      resolve(false);
    }, 1000);
    s.once('connect', () => s.write('GET /_ping HTTP/1.0\r\n\r\n'));
    s.once('data', (d) => {
      clearTimeout(timer);
      s.destroy();
      resolve(d.toString().includes('200 OK'));
    });
    s.once('error', () => {
      clearTimeout(timer);
      resolve(false);
    });
  });
}

export async function startTestServer(): Promise<TestServer> {
  if (process.env.TEST_DATABASE_URL) {
    return { adminUrl: process.env.TEST_DATABASE_URL, kind: 'env', stop: async () => {} };
  }
  if (await dockerAnswers()) {
    const { GenericContainer, Wait } = await import('testcontainers');
    const container = await new GenericContainer('postgres:18')
      .withEnvironment({ POSTGRES_PASSWORD: 'postgres' })
      .withExposedPorts(5432)
      .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
      .start();
    return {
      adminUrl: `postgres://postgres:postgres@${container.getHost()}:${container.getMappedPort(5432)}/postgres`,
      kind: 'testcontainers',
      stop: async () => {
        await container.stop();
      },
    };
  }
  // Same launcher as the app's zero-config mode, on its own port and data directory.
  const embedded = await startEmbeddedPostgres({
    dataDir: path.resolve('.data/test-postgres'),
    port: 54339,
    database: 'postgres',
    settings: { max_connections: '300', fsync: 'off', synchronous_commit: 'off' },
  });
  return { adminUrl: embedded.url, kind: 'embedded', stop: () => embedded.stop() };
}

/** Replaces the database name in a Postgres URL. */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

export async function adminQuery(
  adminUrl: string,
  text: string,
  values: unknown[] = [],
): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    return await client.query(text, values);
  } finally {
    await client.end();
  }
}
