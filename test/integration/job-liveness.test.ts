import { randomUUID } from 'node:crypto';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { JobLiveness, jobLockKey, LIVENESS_APPLICATION_NAME } from '../../src/jobs/liveness.ts';
import { LockSpace } from '../../src/platform/db/locks.ts';
import { captureLogger, waitFor } from '../recovery/helpers.ts';
import { useTestDatabase } from '../support/db.ts';
import { adminQuery } from '../support/postgres-server.ts';

/**
 * The liveness session's reconnect (ADR 0011) against real Postgres: a session cut by the
 * server must take the locks of the jobs marked while it was down by itself, and take each
 * lock exactly once (session advisory locks stack: a lock taken twice survives one unlock).
 */

const t = useTestDatabase();
const { logger, events } = captureLogger();
const sessions: JobLiveness[] = [];

function liveness(url = t.url): JobLiveness {
  const l = new JobLiveness(url, logger);
  sessions.push(l);
  return l;
}

const proxies: ClosingProxy[] = [];

afterEach(async () => {
  await allowConnections(true);
  await Promise.all(sessions.splice(0).map((s) => s.stop()));
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});

interface ClosingProxy {
  /** The test database's URL, through the proxy. */
  url: string;
  /** Server closes held back so far (each a connection the server has ended). */
  readonly held: number;
  /** Passes the held closes on, and every later one at once. */
  release(): void;
  close(): Promise<void>;
}

/**
 * A TCP proxy to this file's database that passes on everything the server sends but holds
 * back its close of a connection until release(): the window a terminated backend opens
 * between its FATAL message and its socket's close (its exit's clean-up runs between them,
 * pg_stat_activity's entry removed first), held open as long as a slow server might.
 */
async function closeHoldingProxy(): Promise<ClosingProxy> {
  const target = new URL(t.url);
  const heldCloses: (() => void)[] = [];
  let holding = true;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.on('data', (d) => upstream.write(d));
    client.on('end', () => upstream.end());
    upstream.on('data', (d) => client.write(d));
    upstream.on('end', () => {
      if (holding) heldCloses.push(() => client.end());
      else client.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(t.url);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as net.AddressInfo).port);
  const proxy: ClosingProxy = {
    url: url.toString(),
    get held() {
      return heldCloses.length;
    },
    release() {
      holding = false;
      for (const end of heldCloses.splice(0)) end();
    },
    async close() {
      proxy.release();
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  proxies.push(proxy);
  return proxy;
}

/**
 * Rows in pg_locks for this job's liveness lock in this file's database (0 or 1: a lock
 * taken twice by one session is still one row, and then survives one unlock). Asked over
 * the admin database, which stays open while this one refuses connections.
 */
async function lockRows(jobId: string): Promise<number> {
  const r = await adminQuery(
    t.adminUrl,
    `SELECT count(*)::int AS n FROM pg_locks
     WHERE locktype = 'advisory' AND granted
       AND database = (SELECT oid FROM pg_database WHERE datname = $1)
       AND classid = $2::int::oid AND objid = $3::int::oid AND objsubid = 2`,
    [t.name, LockSpace.job, jobLockKey(jobId)],
  );
  return r.rows[0].n;
}

/** Whether the server lets new sessions into this file's database (superusers included). */
async function allowConnections(allow: boolean): Promise<void> {
  await adminQuery(t.adminUrl, `ALTER DATABASE ${t.name} WITH ALLOW_CONNECTIONS ${allow}`);
}

async function livenessBackends(): Promise<number> {
  const r = await adminQuery(
    t.adminUrl,
    `SELECT count(*)::int AS n FROM pg_stat_activity
     WHERE datname = $1 AND application_name LIKE $2 || '%'`,
    [t.name, LIVENESS_APPLICATION_NAME],
  );
  return r.rows[0].n;
}

/**
 * Cuts the liveness session from the server side and waits until the worker has seen it
 * go (its 'error' listener logged) and the backend is gone.
 */
async function cutSession(): Promise<void> {
  const lostBefore = events('worker.liveness_lost').length;
  const cut = await adminQuery(
    t.adminUrl,
    `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
     WHERE datname = $1 AND application_name = $2`,
    [t.name, LIVENESS_APPLICATION_NAME],
  );
  expect(cut.rows[0].n).toBe(1);
  await waitFor(() => events('worker.liveness_lost').length > lostBefore, {
    timeoutMs: 30_000,
    what: 'the worker to notice its liveness session was cut',
  });
  await waitFor(async () => (await livenessBackends()) === 0, {
    timeoutMs: 30_000,
    what: 'the liveness backend to exit',
  });
}

describe('job liveness session reconnect', () => {
  it('a job marked while the database refuses connections is locked once it is back, with no further call', async () => {
    const worker = liveness();
    await worker.start();
    // No job running when the session drops: nothing else would schedule a reconnect.
    await allowConnections(false);
    await cutSession();

    const job = randomUUID();
    await worker.hold(job); // never fails the job
    expect(events('worker.liveness_lost')).toContainEqual(expect.objectContaining({ job_id: job }));
    expect(await lockRows(job)).toBe(0);

    await allowConnections(true);
    await waitFor(async () => (await lockRows(job)) === 1, {
      timeoutMs: 30_000,
      what: 'the job lock to be taken by the reconnect',
    });
    await waitFor(async () => (await livenessBackends()) === 1, {
      timeoutMs: 30_000,
      what: 'the reconnected session to be named',
    });

    await worker.release(job);
    expect(await lockRows(job)).toBe(0);
  });

  it('a job whose mark opens the new session holds its lock once, and none after release', async () => {
    const worker = liveness();
    await worker.start();
    await cutSession();

    const job = randomUUID();
    await worker.hold(job); // reconnects, and the new session locks what is held
    expect(await lockRows(job)).toBe(1);
    await worker.release(job);
    expect(await lockRows(job)).toBe(0);

    // And the session still works as before for the next job.
    const next = randomUUID();
    await worker.hold(next);
    expect(await lockRows(next)).toBe(1);
    await worker.release(next);
    expect(await lockRows(next)).toBe(0);
  });

  it('a job marked after the session failed but before its socket closed opens the new session too', async () => {
    // The race the test above can lose on a loaded machine, made certain: the worker has
    // seen the FATAL of its terminated backend (its 'error'), the backend is gone from
    // pg_stat_activity, and the socket's close has not reached the worker yet.
    const proxy = await closeHoldingProxy();
    const worker = liveness(proxy.url);
    await worker.start();
    await cutSession();
    await waitFor(() => proxy.held >= 1, { what: 'the server to close the cut session' });

    const job = randomUUID();
    await worker.hold(job);
    expect(await lockRows(job)).toBe(1);
    expect(events('worker.liveness_lost').filter((e) => e.job_id === job)).toEqual([]);

    // The old socket's close, when it comes, takes nothing from the new session.
    proxy.release();
    await worker.release(job);
    expect(await lockRows(job)).toBe(0);
    const next = randomUUID();
    await worker.hold(next);
    expect(await lockRows(next)).toBe(1);
    await worker.release(next);
    expect(await lockRows(next)).toBe(0);
  });

  it('jobs running when the session drops are locked again once each; a release while down frees it', async () => {
    const worker = liveness();
    await worker.start();
    const [a, b] = [randomUUID(), randomUUID()];
    await worker.hold(a);
    await worker.hold(b);
    await cutSession();
    // Released while the session is down: the reconnect must not lock it again.
    await worker.release(a);
    const c = randomUUID();
    await worker.hold(c);
    await waitFor(async () => (await lockRows(b)) === 1 && (await lockRows(c)) === 1, {
      timeoutMs: 30_000,
      what: 'the running jobs to be locked again',
    });
    expect(await lockRows(a)).toBe(0);
    await worker.release(b);
    await worker.release(c);
    expect(await lockRows(b)).toBe(0);
    expect(await lockRows(c)).toBe(0);
  });
});

describe('jobs that start and end at the same time', () => {
  it('share the one session without overlapping queries (no pg DeprecationWarning), and every lock is taken and dropped', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    try {
      const l = liveness();
      await l.start();
      const jobs = Array.from({ length: 8 }, () => randomUUID());
      await Promise.all(jobs.map((j) => l.hold(j)));
      for (const j of jobs) expect(await lockRows(j)).toBe(1);
      await Promise.all(jobs.map((j) => l.release(j)));
      for (const j of jobs) expect(await lockRows(j)).toBe(0);
      // process 'warning' is emitted on the next tick of the emitWarning call.
      await new Promise((r) => setImmediate(r));
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings.map((w) => `${w.name}: ${w.message}`)).toEqual([]);
  });
});
