import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync, realpathSync, statSync } from 'node:fs';
import pg from 'pg';
import type { Logger } from '../log.ts';
import {
  binaries,
  checkDataDir,
  clusterPaths,
  EmbeddedPostgresFailed,
  ensureInitialised,
  type Ids,
  PASSWORD,
  runningPostmaster,
  SUPERUSER,
  serverUser,
  stopPostmaster,
} from './embedded-cluster.ts';
import { ensureSized, readSizing } from './embedded-sizing.ts';
import { LockSpace } from './locks.ts';

/**
 * The zero-config database (ADR 0002), shared by every project process that uses it.
 * Each process is a *holder*: one connection to the server's `postgres` database holding a
 * shared advisory lock for as long as the process runs. The lock dies with the connection,
 * so a SIGKILLed process stops holding at once and never strands the others. Leaving
 * gracefully, a holder gives its shared lock back and tries the lock
 * exclusively: only the last holder gets it, and it stops the server while still holding
 * it (a process joining meanwhile waits on its shared lock: the leaving holder leaves the
 * server to it, or, joining too late for that, it sees the server go and starts it again).
 * A server found running — its postmaster.pid names a live postgres — is adopted whoever
 * started it, so one left by a killed process is managed again by the next command. A
 * holder whose connection is lost (bin/db stop --force, a crash) holds the server again at
 * once, adopting or starting it.
 */

export const EMBEDDED_PORT = 54329;
export const EMBEDDED_DATABASE = 'github_push_ingestor';
/** application_name prefix of holder connections (bin/db status lists them). */
export const HOLDER_PREFIX = 'gpi-holder';
const MAINTENANCE_DB = 'postgres';
const ACQUIRE_TIMEOUT_MS = 90_000;

export function embeddedUrl(port = EMBEDDED_PORT, database = EMBEDDED_DATABASE): string {
  return `postgres://${SUPERUSER}:${PASSWORD}@127.0.0.1:${port}/${database}`;
}

export interface EmbeddedHandle {
  url: string;
  port: number;
  /** True when this process started the server (false: it adopted a running one). */
  started: boolean;
  /**
   * Stops holding the server; the last holder stops it. Resolves to what happened.
   * Idempotent.
   */
  release(): Promise<'stopped' | 'left_running'>;
}

export interface EmbeddedOptions {
  dataDir: string;
  logger?: Logger;
  /** Port to start on when no server runs yet (a running one is adopted on its own port). */
  port?: number;
  database?: string;
  /** Extra `-c name=value` settings, applied when this process starts the server. */
  settings?: Record<string, string>;
  /** Shows in the holder's application_name (bin/db status). */
  role?: string;
  /**
   * Level of the started/stopped lines: info for a service (where the server's lifetime
   * follows it), debug for a one-shot command (every run would say it).
   */
  lifecycleLevel?: 'info' | 'debug';
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Errors that mean "the server is starting, stopping or just went away: try again". */
function transient(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  return (
    ['ECONNREFUSED', 'ECONNRESET', 'EPIPE', '57P01', '57P03', '55P03'].includes(e.code ?? '') ||
    /Connection terminated|terminating connection|the database system is (starting up|shutting down)/.test(
      e.message ?? '',
    )
  );
}

function holderName(role: string): string {
  return `${HOLDER_PREFIX}:${role}:${process.pid}`.slice(0, 63);
}

function sameDirectory(a: string, b: string): boolean {
  try {
    return realpathSync(a) === realpathSync(b);
  } catch {
    return false;
  }
}

async function ensureDatabase(client: pg.Client, database: string): Promise<void> {
  const r = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
  if (r.rowCount !== 0) return;
  await client.query(`CREATE DATABASE "${database}"`).catch((err: { code?: string }) => {
    // created by a concurrent starter: duplicate_database, or the catalog's unique index
    if (err.code !== '42P04' && err.code !== '23505') throw err;
  });
}

/** Connects as a holder: the shared lock is held until release() or the process dies. */
async function hold(
  port: number,
  cluster: string,
  database: string,
  role: string,
): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString: embeddedUrl(port, MAINTENANCE_DB),
    application_name: holderName(role),
    connectionTimeoutMillis: 10_000,
  });
  client.on('error', () => {}); // replaced by the caller once held; never crash on a late error
  try {
    await client.connect();
    const dir = await client.query<{ data_directory: string }>('SHOW data_directory');
    if (!sameDirectory(dir.rows[0]!.data_directory, cluster)) {
      throw new EmbeddedPostgresFailed(
        'adopting the running server',
        `127.0.0.1:${port} serves ${dir.rows[0]!.data_directory}, not ${cluster}; stop it or set EMBEDDED_POSTGRES_PORT / DATABASE_URL`,
      );
    }
    // Waits while the last holder is stopping the server (it holds the lock exclusively);
    // the server then goes away, this fails as transient, and the caller starts it again.
    await client.query(`SET lock_timeout = '60s'`);
    await client.query('SELECT pg_advisory_lock_shared($1, 0)', [LockSpace.embeddedHolders]);
    await ensureDatabase(client, database);
    return client;
  } catch (err) {
    await client.end().catch(() => {});
    throw err;
  }
}

function portInUse(log: string): boolean {
  return /could not bind|Address already in use/i.test(log);
}

/** The cluster's server is up but still replaying WAL (its log says redo started). */
function recovering(cluster: string, log: string): boolean {
  return runningPostmaster(cluster)?.status === 'starting' && /redo starts at/.test(log);
}

/**
 * Starts postgres detached (its own process group: a terminal's Ctrl-C reaches only us;
 * it outlives us if others hold it) with its output appended to DATA_DIR/postgres.log.
 * Resolves 'ready' once it accepts connections, or 'raced' when another process started
 * this cluster first (postmaster.pid already taken).
 */
async function startServer(
  cluster: string,
  logPath: string,
  port: number,
  settings: Record<string, string>,
  ids: Ids | undefined,
): Promise<'ready' | 'raced'> {
  const { postgres } = await binaries();
  const args = ['-D', cluster, '-p', String(port), '-c', 'listen_addresses=127.0.0.1'];
  for (const [k, v] of Object.entries(settings)) args.push('-c', `${k}=${v}`);
  const logFd = openSync(logPath, 'a');
  const logStart = statSync(logPath).size;
  const child = spawn(postgres, args, { ...ids, detached: true, stdio: ['ignore', logFd, logFd] });
  closeSync(logFd);
  child.unref();
  let exited: number | null | undefined;
  child.once('exit', (code) => {
    exited = code;
  });
  const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));
  const readLog = () => readFileSync(logPath, 'utf8').slice(logStart).trim();
  const begun = Date.now();
  let deadline = begun + 60_000;
  for (;;) {
    const failed = await Promise.race([spawnError, sleep(100).then(() => undefined)]);
    if (failed) throw new EmbeddedPostgresFailed('start', failed.message, failed);
    if (exited !== undefined) {
      const log = readLog();
      if (/lock file .*postmaster\.pid.* already exists/.test(log)) return 'raced';
      if (portInUse(log) && runningPostmaster(cluster)) return 'raced';
      if (portInUse(log)) {
        throw new EmbeddedPostgresFailed(
          'start',
          `port ${port} on 127.0.0.1 is in use by another program; set EMBEDDED_POSTGRES_PORT to a free port, or DATABASE_URL`,
        );
      }
      throw new EmbeddedPostgresFailed('start', `postgres exited ${exited}: ${log.slice(-500)}`);
    }
    const probe = new pg.Client({ connectionString: embeddedUrl(port, MAINTENANCE_DB) });
    probe.on('error', () => {});
    try {
      await probe.connect();
      await probe.end();
      return 'ready';
    } catch (err) {
      await probe.end().catch(() => {});
      if (!transient(err)) throw err;
    }
    if (Date.now() > deadline) {
      // A server replaying its WAL after a crash (up to max_wal_size of it, which
      // embedded-sizing.ts sets) says "starting" in postmaster.pid and logs its redo:
      // stopping it would only make the next start replay the same WAL again. Waited for,
      // up to an hour.
      if (recovering(cluster, readLog()) && Date.now() - begun < 3_600_000) {
        deadline = Date.now() + 60_000;
        continue;
      }
      child.kill('SIGINT');
      throw new EmbeddedPostgresFailed('start', `not ready after 60 s: ${readLog().slice(-500)}`);
    }
  }
}

/** What a process holds: the cluster, and how to start the server on it. */
interface Target {
  cluster: string;
  logPath: string;
  ids: Ids | undefined;
  database: string;
  role: string;
  settings: Record<string, string>;
  logger?: Logger;
  lifecycleLevel: 'info' | 'debug';
}

interface Held {
  client: pg.Client;
  port: number;
  started: boolean;
}

/**
 * Adopts the running server of the cluster, or starts it on `port`, and connects as a
 * holder; retries while the server is starting, stopping or going away (90 s). Resolves
 * null as soon as `cancelled()` says so between attempts.
 */
async function connectHolder(
  t: Target,
  port: number,
  cancelled: () => boolean = () => false,
): Promise<Held | null> {
  const deadline = Date.now() + ACQUIRE_TIMEOUT_MS;
  let started = false;
  let lastError: unknown;
  for (let attempt = 0; Date.now() < deadline; attempt++) {
    if (attempt > 0) await sleep(Math.min(100 * attempt, 1000));
    if (cancelled()) return null;
    let on = runningPostmaster(t.cluster)?.port;
    if (on === undefined) {
      if ((await ensureInitialised(t.cluster, t.ids)) === 'initialised') {
        const block = await readSizing(t.cluster);
        t.logger?.info(
          { event: 'db.embedded_init', dir: t.cluster, sized: block },
          `initialised embedded Postgres in ${t.cluster}, sized to this machine: shared_buffers ${block.shared_buffers}, max_wal_size ${block.max_wal_size}`,
        );
      }
      // A cluster made before its sizing block was written at initdb (embedded-sizing.ts).
      const sized = await ensureSized(t.cluster);
      if (sized) {
        t.logger?.info(
          { event: 'db.embedded_sized', dir: t.cluster, sized },
          `embedded Postgres sized to this machine: shared_buffers ${sized.shared_buffers}, max_wal_size ${sized.max_wal_size} (ALTER SYSTEM overrides)`,
        );
      }
      on = port;
      if ((await startServer(t.cluster, t.logPath, on, t.settings, t.ids)) === 'raced') {
        continue;
      }
      started = true;
      t.logger?.[t.lifecycleLevel](
        { event: 'db.embedded_started', port: on, dir: t.cluster, log: t.logPath },
        `embedded Postgres started on 127.0.0.1:${on} (data ${t.cluster})`,
      );
    }
    try {
      return { client: await hold(on, t.cluster, t.database, t.role), port: on, started };
    } catch (err) {
      if (!transient(err)) throw err;
      lastError = err;
      started = false;
    }
  }
  throw new EmbeddedPostgresFailed(
    'start',
    `gave up after ${ACQUIRE_TIMEOUT_MS / 1000} s: ${(lastError as Error)?.message ?? 'the server kept going away'}`,
    lastError,
  );
}

/**
 * Starts the embedded Postgres of DATA_DIR, or adopts the one already running, and holds
 * it until release(). Works as root: the server then runs as the `postgres` user.
 */
export async function acquireEmbeddedPostgres(opts: EmbeddedOptions): Promise<EmbeddedHandle> {
  const { cluster, log: logPath } = clusterPaths(opts.dataDir);
  const ids = serverUser();
  await checkDataDir(opts.dataDir, ids);
  const target: Target = {
    cluster,
    logPath,
    ids,
    database: opts.database ?? EMBEDDED_DATABASE,
    role: opts.role ?? 'app',
    settings: opts.settings ?? {},
    logger: opts.logger,
    lifecycleLevel: opts.lifecycleLevel ?? 'info',
  };
  const held = (await connectHolder(target, opts.port ?? EMBEDDED_PORT))!;
  if (!held.started) {
    target.logger?.debug(
      { event: 'db.embedded_joined', port: held.port },
      `using the embedded Postgres on 127.0.0.1:${held.port}`,
    );
  }
  return holding(held, target);
}

/**
 * Before the last holder stops the server: waits (at most 5 s) until no project connection
 * to the project database (application_name gpi-*) is open — not the holders' and bin/db's
 * connections, which are to the maintenance database and are not cut mid-work — and answers
 * 'joiner' as soon as a process is waiting for its shared holder lock: it came after the
 * decision to stop, and it is better served by the running server than by a restart.
 */
async function readyToStop(client: pg.Client, database: string): Promise<'stop' | 'joiner'> {
  const deadline = Date.now() + 5_000;
  for (;;) {
    const r = await client.query<{ open: number; joining: number }>(
      `SELECT
         (SELECT count(*)::int FROM pg_stat_activity
          WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
            AND datname = $1 AND application_name LIKE 'gpi-%'
            AND application_name NOT LIKE $2 AND application_name <> 'gpi-db-admin') AS open,
         (SELECT count(*)::int FROM pg_locks
          WHERE locktype = 'advisory' AND NOT granted
            AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            AND classid = $3 AND objid = 0 AND objsubid = 2) AS joining`,
      [database, `${HOLDER_PREFIX}:%`, LockSpace.embeddedHolders],
    );
    if (r.rows[0]!.joining > 0) return 'joiner';
    if (r.rows[0]!.open === 0 || Date.now() > deadline) return 'stop';
    await sleep(25);
  }
}

const REJOIN_RETRY_MS = 5_000;

function holding(first: Held, t: Target): EmbeddedHandle {
  const port = first.port; // the handle's URL, which the process's pools use
  let client: pg.Client | undefined = first.client;
  let releasing: Promise<'stopped' | 'left_running'> | undefined;
  let rejoining: Promise<void> | undefined;

  // Losing the holder connection (bin/db stop --force, a crash) means this process no
  // longer counts: the next command would be the only holder and, on its exit, stop the
  // server under this one. So it holds again at once: adopting the server when it is back
  // (after a backend crash the postmaster restarts by itself), or starting it.
  const watch = (c: pg.Client) => {
    const lost = (err: unknown) => {
      if (releasing || client !== c) return; // our own shutdown, or already handled
      client = undefined;
      c.end().catch(() => {});
      t.logger?.warn(
        { event: 'db.embedded_lost', port, err },
        'the embedded Postgres went away (stopped with bin/db stop --force, or it crashed); using it again as soon as it is back, starting it if need be',
      );
      rejoining = rejoin().catch(() => {}); // it catches its own failures; never unhandled
    };
    c.removeAllListeners('error');
    c.on('error', lost);
    c.on('end', () => lost(new Error('the holder connection ended')));
  };

  const rejoin = async (): Promise<void> => {
    for (let failures = 0; !releasing; failures++) {
      try {
        // On the handle's port, should this process be the one to start it.
        const held = await connectHolder(t, port, () => releasing !== undefined);
        if (!held) return;
        client = held.client; // release(), if it has begun, waits for this and uses it
        watch(held.client);
        if (held.port === port) {
          t.logger?.info(
            { event: 'db.embedded_rejoined', port, started: held.started },
            `using the embedded Postgres on 127.0.0.1:${port} again`,
          );
        } else {
          t.logger?.warn(
            { event: 'db.embedded_rejoined', port: held.port, expected: port, started: false },
            `the embedded Postgres now runs on port ${held.port}, not ${port}: restart this process to use it`,
          );
        }
        return;
      } catch (err) {
        if (failures === 0) {
          t.logger?.error(
            { event: 'db.embedded_rejoin_failed', port, err },
            `could not use or start the embedded Postgres again; retrying every ${REJOIN_RETRY_MS / 1000} s`,
          );
        }
        for (let waited = 0; waited < REJOIN_RETRY_MS && !releasing; waited += 100)
          await sleep(100);
      }
    }
  };

  const release = async (): Promise<'stopped' | 'left_running'> => {
    await rejoining; // never rejects; stops trying once releasing is set
    const c = client;
    if (!c) return 'left_running'; // lost, and not held again
    try {
      await c.query('SELECT pg_advisory_unlock_shared($1, 0)', [LockSpace.embeddedHolders]);
      const r = await c.query<{ last: boolean }>('SELECT pg_try_advisory_lock($1, 0) AS last', [
        LockSpace.embeddedHolders,
      ]);
      if (!r.rows[0]!.last) {
        t.logger?.debug(
          { event: 'db.embedded_left_running', port },
          'embedded Postgres left running for the processes still using it',
        );
        return 'left_running';
      }
      // The last holder: stop the server while holding the lock exclusively — once the
      // project's other connections have closed (ours among them: pg's Pool.end()
      // resolves before its sockets close), so none of them is cut by the shutdown
      // (a 57P01 "terminating connection" warning on a clean exit). Unless a process is
      // waiting to join: ending this connection lets it in, with the server running.
      if ((await readyToStop(c, t.database)) === 'joiner') {
        t.logger?.debug(
          { event: 'db.embedded_left_running', port },
          'embedded Postgres left running for a process joining it',
        );
        return 'left_running';
      }
      const postmaster = runningPostmaster(t.cluster);
      if (postmaster) await stopPostmaster(postmaster.pid);
      t.logger?.[t.lifecycleLevel](
        { event: 'db.embedded_stopped', port },
        'embedded Postgres stopped (no other process is using it)',
      );
      return 'stopped';
    } catch (err) {
      if (!transient(err)) throw err;
      return 'left_running'; // the server was already gone or going
    } finally {
      await c.end().catch(() => {});
    }
  };

  watch(first.client);
  return {
    url: embeddedUrl(port, t.database),
    port,
    started: first.started,
    release() {
      releasing ??= release();
      return releasing;
    },
  };
}
