import { existsSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { EMBEDDED_DATABASE, embeddedUrl, HOLDER_PREFIX } from './embedded.ts';
import {
  clusterPaths,
  type Postmaster,
  runningPostmaster,
  stopPostmaster,
} from './embedded-cluster.ts';
import { LockSpace } from './locks.ts';

/**
 * What bin/db shows and does: the embedded Postgres of DATA_DIR, who holds it, and
 * stopping it. Never starts a server and never becomes a holder.
 */

export interface Holder {
  role: string;
  pid: number;
  since: string;
}

export interface EmbeddedStatus {
  running: boolean;
  initialised: boolean;
  dataDir: string;
  log: string;
  pid: number | null;
  port: number | null;
  url: string | null;
  version: string | null;
  startedAt: string | null;
  /** Processes using it now; empty while running means it was left by a killed process. */
  holders: Holder[];
  connections: number | null;
}

async function connect(port: number): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString: embeddedUrl(port, 'postgres'),
    application_name: 'gpi-db-admin',
    connectionTimeoutMillis: 5_000,
  });
  client.on('error', () => {});
  await client.connect();
  return client;
}

export async function embeddedStatus(dataDir: string): Promise<EmbeddedStatus> {
  const paths = clusterPaths(dataDir);
  const base: EmbeddedStatus = {
    running: false,
    initialised: existsSync(path.join(paths.cluster, 'PG_VERSION')),
    dataDir: paths.cluster,
    log: paths.log,
    pid: null,
    port: null,
    url: null,
    version: null,
    startedAt: null,
    holders: [],
    connections: null,
  };
  const postmaster = runningPostmaster(paths.cluster);
  if (!postmaster) return base;
  const running = {
    ...base,
    running: true,
    pid: postmaster.pid,
    port: postmaster.port,
    url: embeddedUrl(postmaster.port, EMBEDDED_DATABASE),
  };
  let client: pg.Client | undefined;
  try {
    client = await connect(postmaster.port);
    const info = await client.query<{ version: string; started: Date; connections: string }>(
      `SELECT current_setting('server_version') AS version, pg_postmaster_start_time() AS started,
              (SELECT count(*) FROM pg_stat_activity
               WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()) AS connections`,
    );
    const holders = await client.query<{ name: string; since: Date }>(
      `SELECT application_name AS name, backend_start AS since FROM pg_stat_activity
       WHERE application_name LIKE $1 ORDER BY backend_start`,
      [`${HOLDER_PREFIX}:%`],
    );
    return {
      ...running,
      version: info.rows[0]!.version,
      startedAt: info.rows[0]!.started.toISOString(),
      connections: Number(info.rows[0]!.connections),
      holders: holders.rows.map((h) => {
        const [, role = '?', pid = '0'] = h.name.split(':');
        return { role, pid: Number(pid), since: h.since.toISOString() };
      }),
    };
  } catch {
    return running; // starting or stopping: the postmaster is there, connections are not
  } finally {
    await client?.end().catch(() => {});
  }
}

export type StopResult =
  | { outcome: 'not_running' }
  | { outcome: 'in_use'; holders: Holder[] }
  /** Without force: the server runs but refused the admin connection, so who holds it is unknown. */
  | { outcome: 'unknown_holders'; pid: number; cause: string }
  | { outcome: 'stopped'; pid: number; port: number };

/**
 * Stops the embedded Postgres. While processes hold it, only with `force` (they then lose
 * their database). Without force the holders' lock is taken exclusively first, so no
 * process can join between the check and the stop; a server that cannot be asked (the
 * connection fails) is not stopped.
 */
export async function stopEmbedded(dataDir: string, force: boolean): Promise<StopResult> {
  const { cluster } = clusterPaths(dataDir);
  const postmaster: Postmaster | null = runningPostmaster(cluster);
  if (!postmaster) return { outcome: 'not_running' };
  let client: pg.Client | undefined;
  try {
    let cause: unknown;
    client = await connect(postmaster.port).catch((err: unknown) => {
      cause = err;
      return undefined;
    });
    if (!client && !force) {
      const e = cause as { message?: string; code?: string } | undefined;
      return {
        outcome: 'unknown_holders',
        pid: postmaster.pid,
        cause: e?.message || e?.code || String(cause),
      };
    }
    if (client && !force) {
      const r = await client.query<{ free: boolean }>(
        'SELECT pg_try_advisory_lock($1, 0) AS free',
        [LockSpace.embeddedHolders],
      );
      if (!r.rows[0]!.free) {
        const status = await embeddedStatus(dataDir);
        return { outcome: 'in_use', holders: status.holders };
      }
    }
    await stopPostmaster(postmaster.pid);
    return { outcome: 'stopped', pid: postmaster.pid, port: postmaster.port };
  } finally {
    await client?.end().catch(() => {});
  }
}
