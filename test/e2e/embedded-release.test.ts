import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { acquireEmbeddedPostgres } from '../../src/db/embedded.ts';
import { createPool } from '../../src/db/pool.ts';
import { sparePort } from '../support/embedded-env.ts';

/**
 * The last holder stops the embedded server only after the process's own connections have
 * closed (ADR 0030). pg's Pool.end() resolves before its sockets close, so a process that
 * closed its pool and then stopped the server at once cut its own closing connections:
 * "terminating connection due to administrator command" (57P01) warnings on a clean exit.
 */

let dataDir: string | undefined;
afterEach(async () => {
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
  dataDir = undefined;
});

describe('releasing the embedded Postgres', () => {
  it('the last holder waits for the pools it just ended before it stops the server', async () => {
    dataDir = await mkdtemp(path.join(os.tmpdir(), 'gpi-release-'));
    await chmod(dataDir, 0o755);
    const handle = await acquireEmbeddedPostgres({
      dataDir,
      port: await sparePort(),
      role: 'test',
    });
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
  }, 60_000);
});
