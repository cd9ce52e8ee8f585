import { execFileSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterPaths } from '../../src/platform/db/embedded-cluster.ts';
import { READINESS_TIMEOUT_MS } from '../../src/web/readiness.ts';
import { startThrowawayPostgres, type ThrowawayPostgres } from '../support/throwaway-postgres.ts';
import { waitFor } from './helpers.ts';
import { type Child, killAll, spawnBin } from './world.ts';

/**
 * The red team's case: Postgres frozen by SIGSTOP — every process of the
 * server, so sockets stay open and nothing answers. /readyz of a real bin/web must answer
 * 503 by its own timeout (the fetch returns: the server, not the test, bounds the wait),
 * and 200 again once the server is continued.
 */

const DATABASE = 'gpi_readyz_frozen';
let server: ThrowawayPostgres;
const children: Child[] = [];
let frozen: number[] = [];

beforeAll(async () => {
  server = await startThrowawayPostgres(DATABASE);
}, 120_000);

afterAll(async () => {
  signal(frozen, 'SIGCONT');
  await killAll(children);
  await server?.destroy();
}, 180_000);

/** The postmaster (first line of postmaster.pid) and every process it started. */
async function serverProcesses(): Promise<number[]> {
  const { cluster } = clusterPaths(server.dataDir);
  const pidFile = await readFile(path.join(cluster, 'postmaster.pid'), 'utf8');
  const postmaster = Number(pidFile.split('\n')[0]);
  const children = execFileSync('ps', ['-o', 'pid=', '--ppid', String(postmaster)], {
    encoding: 'utf8',
  })
    .split('\n')
    .map((l) => Number(l.trim()))
    .filter((n) => n > 0);
  return [postmaster, ...children];
}

function signal(pids: number[], sig: 'SIGSTOP' | 'SIGCONT') {
  for (const pid of pids) {
    try {
      process.kill(pid, sig);
    } catch {
      // gone already
    }
  }
}

async function readyz(url: string) {
  const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(60_000) });
  return { status: res.status, body: (await res.json()) as { ready: boolean; reason?: string } };
}

describe('/readyz with Postgres frozen (SIGSTOP)', () => {
  it('answers 503 within its own timeout while frozen, and 200 once continued', {
    timeout: 120_000,
  }, async () => {
    const env = { DATABASE_URL: server.url, GITHUB_MODE: 'fixture', HTTP_PORT: '0' };
    const setup = spawnBin('setup', env);
    expect((await setup.exited).code, setup.stderr.join('')).toBe(0);
    const web = spawnBin('web', env);
    children.push(web);
    const url = String(
      (await web.waitForLine((l) => l.event === 'web.listening', 'the web to listen')).url,
    );
    expect((await readyz(url)).status).toBe(200);

    frozen = await serverProcesses();
    signal(frozen, 'SIGSTOP');
    try {
      // Several at once, as a load balancer and an orchestrator would ask.
      const answers = await Promise.all(Array.from({ length: 5 }, () => readyz(url)));
      for (const a of answers) {
        expect(a.status).toBe(503);
        expect(a.body.reason).toMatch(/^database unreachable: /);
      }
      expect(
        answers.some((a) => a.body.reason!.includes(`within ${READINESS_TIMEOUT_MS} ms`)),
      ).toBe(true);
      // Still frozen: asked again, the same answer (no check left hanging in the way).
      expect((await readyz(url)).status).toBe(503);
    } finally {
      signal(frozen, 'SIGCONT');
      frozen = [];
    }
    await waitFor(async () => (await readyz(url)).status === 200, {
      what: '/readyz to answer 200 after SIGCONT',
      timeoutMs: 30_000,
    });
    expect(web.process.exitCode).toBeNull();
  });
});
