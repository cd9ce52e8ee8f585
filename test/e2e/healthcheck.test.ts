import os from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { type Child, killAll, spawnBin } from '../recovery/world.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { sparePort } from '../support/embedded-env.ts';

/** bin/healthcheck, as docker-compose.yml's worker and web healthchecks run it (item 10). */

const t = useTestDatabase();
const children: Child[] = [];
afterAll(() => killAll(children));

describe('bin/healthcheck', () => {
  it('worker: unhealthy before a worker runs on this host, healthy while it runs, unhealthy once it stopped', async () => {
    const env = { DATABASE_URL: t.url, GITHUB_MODE: 'fixture' };
    const before = await runBin('healthcheck', ['worker'], env);
    expect(before).toMatchObject({ code: 1, out: '' });
    expect(before.err).toBe(
      `healthcheck: worker unhealthy: no worker has registered on host ${os.hostname()}\n`,
    );

    const worker = spawnBin('worker', env);
    children.push(worker);
    await worker.waitForLine((l) => l.event === 'worker.started', 'worker.started');
    expect(await runBin('healthcheck', ['worker'], env)).toEqual({
      code: 0,
      out: 'healthcheck: worker healthy\n',
      err: '',
    });

    worker.process.kill('SIGTERM');
    expect(await worker.exited).toEqual({ code: 0, signal: null });
    const after = await runBin('healthcheck', ['worker'], env);
    expect(after.code).toBe(1);
    expect(after.err).toMatch(/the worker on host .* has not sent a heartbeat since/);
  }, 180_000);

  it('web: healthy while /healthz answers 200 on HTTP_PORT, unhealthy when nothing listens', async () => {
    const port = String(await sparePort());
    const env = { DATABASE_URL: t.url, GITHUB_MODE: 'fixture', HTTP_PORT: port };
    const web = spawnBin('web', env);
    children.push(web);
    await web.waitForLine((l) => l.event === 'web.listening', 'web.listening');
    expect(await runBin('healthcheck', ['web'], env)).toMatchObject({
      code: 0,
      out: 'healthcheck: web healthy\n',
    });
    web.process.kill('SIGTERM');
    await web.exited;
    const down = await runBin('healthcheck', ['web'], env);
    expect(down.code).toBe(1);
    expect(down.err).toMatch(`healthcheck: web unhealthy: http://127.0.0.1:${port}/healthz: `);
  }, 180_000);

  it('needs to be told which service (exit 2)', async () => {
    const r = await runBin('healthcheck', ['db'], { DATABASE_URL: t.url });
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/unknown service: worker or web/);
  });
});
