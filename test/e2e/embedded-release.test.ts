import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  acquireEmbeddedPostgres,
  type EmbeddedHandle,
  embeddedUrl,
} from '../../src/platform/db/embedded.ts';
import { stopEmbedded } from '../../src/platform/db/embedded-admin.ts';
import { LockSpace } from '../../src/platform/db/locks.ts';
import { createPool } from '../../src/platform/db/pool.ts';
import { createLogger } from '../../src/platform/log.ts';
import { sparePort } from '../support/embedded-env.ts';

/**
 * The last holder stops the embedded server only after the process's own connections have
 * closed (ADR 0030). pg's Pool.end() resolves before its sockets close, so a process that
 * closed its pool and then stopped the server at once cut its own closing connections:
 * "terminating connection due to administrator command" (57P01) warnings on a clean exit.
 */

// One cluster for the file (initdb once); each test starts and stops its server.
let dataDir = '';
let port = 0;
const clients: pg.Client[] = [];
const handles: Promise<EmbeddedHandle>[] = [];
beforeAll(async () => {
  dataDir = await mkdtemp(path.join(os.tmpdir(), 'gpi-release-'));
  await chmod(dataDir, 0o755);
  port = await sparePort();
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.end().catch(() => {})));
  // whatever a failed test left joining or running
  for (const h of await Promise.allSettled(handles.splice(0)))
    if (h.status === 'fulfilled') await h.value.release().catch(() => {});
  await stopEmbedded(dataDir, true);
});
afterAll(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

function acquire(role: string, events?: Record<string, unknown>[]): Promise<EmbeddedHandle> {
  const logger = events
    ? createLogger('debug', { write: (line: string) => events.push(JSON.parse(line)) })
    : undefined;
  const handle = acquireEmbeddedPostgres({ dataDir, port, role, logger });
  handles.push(handle);
  return handle;
}

async function plainClient(url: string, applicationName?: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, application_name: applicationName });
  client.on('error', () => {}); // the server stopping under it
  clients.push(client);
  await client.connect();
  return client;
}

describe('releasing the embedded Postgres', () => {
  it('the last holder waits for the pools it just ended before it stops the server', async () => {
    const handle = await acquire('test');
    const errors: unknown[] = [];
    const pools = Array.from({ length: 3 }, (_, i) => {
      const pool = createPool(handle.url, { max: 4, applicationName: `gpi-release-${i}` });
      pool.on('connect', (client) => client.on('error', (err) => errors.push(err)));
      return pool;
    });
    // Several open connections per pool, as a command has at its end.
    await Promise.all(
      pools.flatMap((pool) => Array.from({ length: 4 }, () => pool.query('SELECT pg_sleep(0.05)'))),
    );
    // And one connection that takes a moment longer to close (a slow socket, a busy loop).
    const slow = createPool(handle.url, { max: 1, applicationName: 'gpi-release-slow' });
    slow.on('connect', (client) => client.on('error', (err) => errors.push(err)));
    await slow.query('SELECT 1');
    const closing = new Promise((r) => setTimeout(r, 300)).then(() => slow.end());
    await Promise.all(pools.map((p) => p.end()));
    const started = Date.now();
    expect(await handle.release()).toBe('stopped');
    expect(Date.now() - started).toBeGreaterThanOrEqual(250); // it waited for the slow one
    await closing;
    await new Promise((r) => setTimeout(r, 200)); // let any late socket error arrive
    expect(errors).toEqual([]);
  }, 180_000);

  it('does not wait for connections to the maintenance database: bin/db status, holders', async () => {
    const handle = await acquire('test');
    // bin/db status (gpi-db-admin), a holder waiting for its lock, anything else there.
    await plainClient(embeddedUrl(handle.port, 'postgres'), 'gpi-db-admin');
    await plainClient(embeddedUrl(handle.port, 'postgres'), 'gpi-holder:other:1');
    await plainClient(embeddedUrl(handle.port, 'postgres'), 'gpi-something-else');
    const started = Date.now();
    expect(await handle.release()).toBe('stopped');
    // Waiting for them would take the whole 5 s cap before the stop; not waiting takes only
    // the stop (about 0.3 s idle, 1-3 s at load average 15). Bounded by the cap itself, not
    // by an idle machine's speed.
    expect(Date.now() - started).toBeLessThan(5_000);
  }, 120_000);

  it('leaves the server running to a process waiting to join while the last one leaves', async () => {
    const last = await acquire('last');
    // A project connection that stays open keeps the last holder waiting before the stop…
    await plainClient(last.url, 'gpi-slow');
    const observer = await plainClient(embeddedUrl(last.port, 'postgres'));
    const releasing = last.release();
    // …with the holders' lock held exclusively: the decision to stop has been taken.
    const exclusive = async () =>
      (
        await observer.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_locks
           WHERE locktype = 'advisory' AND classid = $1 AND objid = 0 AND objsubid = 2
             AND mode = 'ExclusiveLock' AND granted`,
          [LockSpace.embeddedHolders],
        )
      ).rows[0]!.n;
    while ((await exclusive()) === 0) await new Promise((r) => setTimeout(r, 10));
    // A process joins now: it waits on its shared lock.
    const joining = acquire('joiner');
    // 'left_running' is the proof it saw the joiner: past the 5 s cap it would have stopped.
    expect(await releasing).toBe('left_running');
    const joined = await joining;
    expect(joined.started).toBe(false); // it used the running server, no stop and restart
    await Promise.all(clients.splice(0).map((c) => c.end()));
    expect(await joined.release()).toBe('stopped');
  }, 120_000);

  it('a holder whose connection is cut holds the server again, so the next command leaves it running', async () => {
    const events: Record<string, unknown>[] = [];
    const service = await acquire('service', events);
    const observer = await plainClient(embeddedUrl(port, 'postgres'));
    /** Backend pids of the role's holder connections that hold the shared lock. */
    const holders = async (role: string) =>
      (
        await observer.query<{ pid: number }>(
          `SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
           WHERE a.application_name LIKE $1 AND l.locktype = 'advisory' AND l.classid = $2
             AND l.objid = 0 AND l.objsubid = 2 AND l.mode = 'ShareLock' AND l.granted`,
          [`gpi-holder:${role}:%`, LockSpace.embeddedHolders],
        )
      ).rows.map((r) => r.pid);
    const [before] = await holders('service');
    expect(before).toBeDefined();
    // What a crashed backend or an operator's pg_terminate_backend does to it.
    await observer.query('SELECT pg_terminate_backend($1)', [before]);
    const deadline = Date.now() + 10_000;
    let now = await holders('service');
    // The new holder's lock is granted a moment before its rejoin is logged: wait for both.
    const rejoined = () => events.some((e) => e.event === 'db.embedded_rejoined');
    while ((now.length !== 1 || now[0] === before || !rejoined()) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      now = await holders('service');
    }
    expect(now).toHaveLength(1);
    expect(now[0]).not.toBe(before); // a new holder connection
    expect(events.filter((e) => e.event === 'db.embedded_lost')).toHaveLength(1);
    expect(events.filter((e) => e.event === 'db.embedded_rejoined')).toMatchObject([
      { level: 'info', started: false }, // the server was still there: adopted, not started
    ]);
    // A command run now is not the last holder, so it does not stop the server.
    const command = await acquire('command');
    expect(await command.release()).toBe('left_running');
    await Promise.all(clients.splice(0).map((c) => c.end()));
    expect(await service.release()).toBe('stopped');
  }, 120_000);
});
