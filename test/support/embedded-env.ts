import { chmod, mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { runBin } from './cli.ts';

/**
 * An environment for running bin/* on the zero-config path exactly as a new user does (no
 * DATABASE_URL), but on a DATA_DIR and EMBEDDED_POSTGRES_PORT of the test's own, so it
 * never meets a developer's `npm start` on 54329. `cleanup()` stops whatever server is
 * left (bin/db stop --force) and deletes the directory.
 */
export interface EmbeddedEnv {
  dataDir: string;
  port: number;
  env: Record<string, string | undefined>;
  cleanup(): Promise<void>;
}

export function sparePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

export async function freshEmbeddedEnv(extra: Record<string, string> = {}): Promise<EmbeddedEnv> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'gpi-zero-config-'));
  // As root the server runs as `postgres`, which must be able to enter the directory.
  await chmod(dataDir, 0o755);
  const port = await sparePort();
  const env = {
    DATABASE_URL: undefined,
    DATA_DIR: dataDir,
    EMBEDDED_POSTGRES_PORT: String(port),
    GITHUB_MODE: 'fixture',
    LOG_LEVEL: 'info',
    LOG_FORMAT: undefined,
    ...extra,
  };
  return {
    dataDir,
    port,
    env,
    async cleanup() {
      await runBin('db', ['stop', '--force'], env);
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
