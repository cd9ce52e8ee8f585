import { existsSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import pg from 'pg';
import { acquireEmbeddedPostgres } from '../../src/platform/db/embedded.ts';

/**
 * Where the tests' Postgres comes from. TEST_POSTGRES chooses: `url` (TEST_DATABASE_URL),
 * `docker` (a testcontainers postgres:18), `embedded` (the embedded Postgres 18 under
 * .data/test-postgres, on a free port). Unset, this order: TEST_DATABASE_URL if set,
 * else testcontainers when a Docker engine answers and already holds its images — falling
 * back to embedded when the container cannot start — else embedded.
 */
export interface TestServer {
  /** A URL to a maintenance database (we CREATE/DROP databases through it). */
  adminUrl: string;
  kind: 'env' | 'testcontainers' | 'embedded';
  /** One line for the run's output: which server, and why. */
  description: string;
  stop(): Promise<void>;
}

export const TEST_POSTGRES_CHOICES = ['url', 'docker', 'embedded'] as const;
export type TestPostgres = (typeof TEST_POSTGRES_CHOICES)[number];

/** The image the testcontainers path runs, and the reaper testcontainers starts beside it. */
const POSTGRES_IMAGE = 'postgres:18';
const RYUK_IMAGE = /^testcontainers\/ryuk:/;

/** One GET to the Docker engine's socket; null when nothing answers within a second. */
function dockerGet(path: string): Promise<string | null> {
  const socket = process.env.DOCKER_HOST?.startsWith('unix://')
    ? process.env.DOCKER_HOST.slice(7)
    : '/var/run/docker.sock';
  if (!existsSync(socket)) return Promise.resolve(null);
  return new Promise((resolve) => {
    const s = net.connect(socket);
    const chunks: Buffer[] = [];
    const done = (v: string | null) => {
      clearTimeout(timer);
      s.destroy();
      resolve(v);
    };
    const timer = setTimeout(() => done(null), 1000);
    s.once('connect', () => s.write(`GET ${path} HTTP/1.0\r\nHost: docker\r\n\r\n`));
    s.on('data', (d: Buffer) => chunks.push(d));
    s.once('end', () => done(Buffer.concat(chunks).toString()));
    s.once('error', () => done(null));
  });
}

/**
 * A Docker engine that can run the testcontainers path without reaching a registry: it
 * answers, and already holds postgres:18 (and testcontainers' Ryuk image, unless
 * TESTCONTAINERS_RYUK_DISABLED=true). `npm test` never pulls an image; TEST_POSTGRES=docker
 * asks for the path whatever the engine holds.
 */
async function dockerReady(): Promise<boolean> {
  const answer = await dockerGet('/images/json');
  if (!answer?.startsWith('HTTP/1.0 200') && !answer?.startsWith('HTTP/1.1 200')) return false;
  let tags: string[];
  try {
    const images = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as {
      RepoTags?: string[] | null;
    }[];
    tags = images.flatMap((i) => i.RepoTags ?? []);
  } catch {
    return false;
  }
  return holdsTestImages(tags);
}

/** Whether an engine with these image tags can start the testcontainers path unpulled. */
export function holdsTestImages(tags: readonly string[], env = process.env): boolean {
  const ryukOff = env.TESTCONTAINERS_RYUK_DISABLED === 'true';
  return tags.includes(POSTGRES_IMAGE) && (ryukOff || tags.some((t) => RYUK_IMAGE.test(t)));
}

/**
 * A port nobody listens on now, for the embedded test server: a fixed one would let only one
 * checkout on a machine run `npm test`. Used only to start the server; a running one (another
 * vitest run of this checkout) is adopted on its own port.
 */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

function urlServer(env: NodeJS.ProcessEnv): TestServer {
  const url = env.TEST_DATABASE_URL;
  if (!url) throw new Error('TEST_POSTGRES=url needs TEST_DATABASE_URL');
  const u = new URL(url);
  return {
    adminUrl: url,
    kind: 'env',
    description: `TEST_DATABASE_URL (${u.hostname}:${u.port || 5432})`,
    stop: async () => {},
  };
}

async function dockerServer(): Promise<TestServer> {
  const { GenericContainer, Wait } = await import('testcontainers');
  const container = await new GenericContainer(POSTGRES_IMAGE)
    .withEnvironment({ POSTGRES_PASSWORD: 'postgres' })
    .withExposedPorts(5432)
    .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
    .withStartupTimeout(120_000)
    .start();
  return {
    adminUrl: `postgres://postgres:postgres@${container.getHost()}:${container.getMappedPort(5432)}/postgres`,
    kind: 'testcontainers',
    description: `testcontainers ${POSTGRES_IMAGE} (${container.getId().slice(0, 12)})`,
    stop: async () => {
      await container.stop();
    },
  };
}

async function embeddedServer(): Promise<TestServer> {
  // Same launcher as the app's zero-config mode, on its own port and data directory.
  const embedded = await acquireEmbeddedPostgres({
    dataDir: path.resolve('.data/test-postgres'),
    port: await freePort(),
    database: 'postgres',
    // The suite's small databases gain nothing from the buffers and the WAL the server
    // would be sized to (ADR 0208): each DROP DATABASE scans every buffer, and each
    // database cloned from the template is written whole to the WAL, which would pile up
    // to 8 GB between checkpoints. Postgres's defaults.
    settings: {
      max_connections: '300',
      fsync: 'off',
      synchronous_commit: 'off',
      shared_buffers: '128MB',
      max_wal_size: '1GB',
      checkpoint_timeout: '5min',
    },
    role: 'vitest',
  });
  return {
    adminUrl: embedded.url,
    kind: 'embedded',
    description: `embedded Postgres on 127.0.0.1:${embedded.port} (.data/test-postgres)`,
    stop: async () => {
      await embedded.release();
    },
  };
}

export function testPostgresChoice(env = process.env): TestPostgres | undefined {
  const raw = env.TEST_POSTGRES?.trim();
  if (!raw) return undefined;
  if (!(TEST_POSTGRES_CHOICES as readonly string[]).includes(raw)) {
    throw new Error(
      `TEST_POSTGRES must be one of ${TEST_POSTGRES_CHOICES.join(', ')} (got "${raw}")`,
    );
  }
  return raw as TestPostgres;
}

/** The ways to get a server; tests of this choice pass stand-ins. */
export interface ServerSources {
  env: NodeJS.ProcessEnv;
  log: (line: string) => void;
  /** A Docker engine answers and holds the images (never pulls: see dockerReady). */
  dockerAnswers: () => Promise<boolean>;
  docker: () => Promise<TestServer>;
  embedded: () => Promise<TestServer>;
}

const realSources: ServerSources = {
  env: process.env,
  log: (line) => process.stderr.write(`${line}\n`),
  dockerAnswers: dockerReady,
  docker: dockerServer,
  embedded: embeddedServer,
};

export async function startTestServer(sources: Partial<ServerSources> = {}): Promise<TestServer> {
  const { env, log, docker, embedded, ...s } = { ...realSources, ...sources };
  const choice = testPostgresChoice(env);
  if (choice === 'url') return urlServer(env);
  if (choice === 'docker') return docker();
  if (choice === 'embedded') return embedded();
  if (env.TEST_DATABASE_URL) return urlServer(env);
  if (await s.dockerAnswers()) {
    try {
      return await docker();
    } catch (err) {
      // An engine that answers is not one that can run postgres:18 (no registry to pull
      // it or testcontainers' Ryuk from, a daemon without network …): the tests still run.
      log(
        `tests: testcontainers could not start postgres:18 (${(err as Error).message.split('\n')[0]}); falling back to the embedded Postgres (TEST_POSTGRES=docker makes this an error)`,
      );
    }
  }
  return embedded();
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
