import os from 'node:os';
import { createBoss } from '../jobs/boss.ts';
import { loadConfig } from '../platform/config/config.ts';
import { embeddedStatus } from '../platform/db/embedded-admin.ts';
import { UsageError } from '../platform/errors.ts';
import { createLogger } from '../platform/log.ts';
import { quoted } from '../platform/quote.ts';
import { parseCli } from './args.ts';

const USAGE = `
Usage:
  bin/healthcheck worker   exit 0 when a bin/worker on this host is alive: its pg-boss
                           instance ("worker", this hostname) has sent a heartbeat within
                           its last three beats (so its event loop runs and it reaches the
                           database)
  bin/healthcheck web      exit 0 when GET http://127.0.0.1:HTTP_PORT/healthz answers 200

For container healthchecks (docker-compose.yml). Prints one line saying why (stdout when
healthy, stderr when not). Never starts a database: without DATABASE_URL it uses the
embedded Postgres only if one is running.
Exit codes: 0 healthy; 1 unhealthy; 2 bad arguments or configuration.
`;

async function worker(): Promise<string | null> {
  const config = loadConfig();
  let url = config.databaseUrl;
  if (!url) {
    const embedded = await embeddedStatus(config.dataDir);
    if (!embedded.running || !embedded.url)
      return 'no database: DATABASE_URL is unset and the embedded Postgres is not running';
    url = embedded.url;
  }
  // Not supervising, so not registering an instance of its own; its errors are the answer.
  const boss = createBoss(url, config, createLogger('silent'), {
    role: 'healthcheck',
    max: 1,
    supervise: false,
  });
  try {
    await boss.start();
    const host = os.hostname();
    const mine = (await boss.getInstances()).filter((i) => i.name === 'worker' && i.host === host);
    const live = mine.find((i) => i.live);
    if (live) return null;
    return mine.length === 0
      ? `no worker has registered on host ${host}`
      : `the worker on host ${host} has not sent a heartbeat since ${mine[0]!.heartbeatOn.toISOString()}`;
  } finally {
    await boss.stop({ graceful: false }).catch(() => {});
  }
}

async function web(): Promise<string | null> {
  const { http } = loadConfig();
  const url = `http://127.0.0.1:${http.port}/healthz`;
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
    return res.status === 200 ? null : `${url} answered ${res.status}`;
  } catch (err) {
    return `${url}: ${(err as Error).message}`;
  }
}

export async function main(argv: string[]): Promise<number> {
  const parsed = parseCli(argv, USAGE, {}, { allowPositionals: true });
  if (!parsed) return 0;
  const [what, ...rest] = parsed.positionals;
  if (rest.length > 0) throw new UsageError(`unexpected argument ${quoted(rest[0]!)}\n${USAGE}`);
  if (what !== 'worker' && what !== 'web') {
    throw new UsageError(
      `${what === undefined ? 'missing' : `unknown`} service: worker or web\n${USAGE}`,
    );
  }
  const problem = await (what === 'worker' ? worker() : web());
  if (problem) {
    process.stderr.write(`healthcheck: ${what} unhealthy: ${problem}\n`);
    return 1;
  }
  process.stdout.write(`healthcheck: ${what} healthy\n`);
  return 0;
}
