import { sql } from 'kysely';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/platform/config/config.ts';
import {
  adoptStoredSettings,
  checkStoredSettings,
  StoredSettingMismatch,
} from '../../src/platform/config/stored-settings.ts';
import { createDb, createPool } from '../../src/platform/db/pool.ts';
import { type Child, killAll, spawnBin } from '../recovery/world.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';

/**
 * One configuration per database for what shapes stored data (ADR 0125),
 * with the real commands. The test database is migrated but has no settings recorded: a
 * database set up before stored_settings existed.
 */

const t = useTestDatabase();
const children: Child[] = [];
afterAll(() => killAll(children));

// COMMIT_EMAILS set, as an operator who chose it: unset, a process takes the database's.
const env = (extra: Record<string, string | undefined> = {}) => ({
  DATABASE_URL: t.url,
  GITHUB_MODE: 'fixture',
  LOG_LEVEL: 'warn',
  COMMIT_EMAILS: 'hash',
  ...extra,
});

async function recorded() {
  return t.db
    .selectFrom('stored_settings')
    .select(['name', 'value', 'previous_value'])
    .orderBy(sql`name COLLATE "C"`)
    .execute();
}

async function runCount(): Promise<number> {
  const r = await sql<{ n: number }>`SELECT count(*)::int AS n FROM ingestion_runs`.execute(t.db);
  return r.rows[0]!.n;
}

const MISMATCH =
  /configuration error: COMMIT_EMAILS is "keep" here, but this database's stored data is shaped by COMMIT_EMAILS="hash" \(recorded \S+ by bin\/setup on [^)]+\): set COMMIT_EMAILS=hash, or change the database's setting on purpose with bin\/setup --reconfigure/;

beforeEach(async () => {
  await sql`DELETE FROM stored_settings`.execute(t.db);
});

describe('stored-data settings', () => {
  it('bin/setup records them once; a setup or writer that disagrees refuses with exit 2', {
    // Eleven commands, each a process start: a bound, not a timing claim.
    timeout: 400_000,
  }, async () => {
    const first = await runBin('setup', [], env());
    expect(first.code).toBe(0);
    expect(first.out).toMatch(
      /stored-data settings COMMIT_EMAILS=hash, COMMITS_MAX_PER_PUSH=250\n$/,
    );
    expect(await recorded()).toEqual([
      { name: 'COMMITS_MAX_PER_PUSH', value: '250', previous_value: null },
      { name: 'COMMIT_EMAILS', value: 'hash', previous_value: null },
    ]);
    expect((await runBin('setup', [], env())).out).toBe(
      'setup: nothing to do, the database is up to date\n',
    );

    for (const [name, argv] of [
      ['setup', []],
      ['worker', []],
      ['ingest', []],
      ['commits', ['--limit', '1']],
      ['backfill', ['--gaps']],
    ] as const) {
      const r = await runBin(name, [...argv], env({ COMMIT_EMAILS: 'keep' }));
      expect(r.code, `${name}: ${r.err}`).toBe(2);
      // One line, naming both values and how to change them.
      expect(r.err.trim().split('\n')).toHaveLength(1);
      expect(r.err).toMatch(MISMATCH);
    }
    const capped = await runBin('ingest', [], env({ COMMITS_MAX_PER_PUSH: '10' }));
    expect(capped.code).toBe(2);
    expect(capped.err).toMatch(
      /COMMITS_MAX_PER_PUSH is "10" here, but this database's stored data is shaped by COMMITS_MAX_PER_PUSH="250"/,
    );
    // Nothing was done by any of them.
    expect(await runCount()).toBe(0);
    expect(await recorded()).toHaveLength(2);

    // Readers do not refuse: bin/status, and bin/web without WEBHOOK_SECRET.
    expect((await runBin('status', [], env({ COMMIT_EMAILS: 'keep' }))).code).toBe(0);
    const reader = spawnBin(
      'web',
      env({ COMMIT_EMAILS: 'keep', HTTP_PORT: '0', LOG_LEVEL: 'info' }),
    );
    children.push(reader);
    await reader.waitForLine((l) => l.event === 'web.listening', 'the web to listen', 60_000);
    reader.process.kill('SIGTERM');
    expect(await reader.exited).toEqual({ code: 0, signal: null });
    // ...but a web that stores webhook deliveries does.
    const hooks = await runBin(
      'web',
      [],
      env({ COMMIT_EMAILS: 'keep', WEBHOOK_SECRET: 's', HTTP_PORT: '0' }),
    );
    expect(hooks.code).toBe(2);
    expect(hooks.err).toMatch(MISMATCH);
  });

  it('two workers with different COMMIT_EMAILS on a database with none recorded: the second refuses', {
    timeout: 240_000,
  }, async () => {
    const first = spawnBin('worker', env({ LOG_LEVEL: 'info', TICK_SECONDS: '3600' }));
    children.push(first);
    const line = await first.waitForLine(
      (l) => l.event === 'setup.settings_recorded',
      'the first worker to record its settings',
      60_000,
    );
    expect(line.settings).toEqual({ COMMIT_EMAILS: 'hash', COMMITS_MAX_PER_PUSH: '250' });
    const second = await runBin('worker', [], env({ COMMIT_EMAILS: 'keep' }));
    expect(second.code).toBe(2);
    expect(second.err).toMatch(
      /COMMIT_EMAILS is "keep" here, but this database's stored data is shaped by COMMIT_EMAILS="hash" \(recorded \S+ by bin\/worker on /,
    );
    first.process.kill('SIGTERM');
    expect(await first.exited).toEqual({ code: 0, signal: null });
  });

  it('COMMIT_EMAILS unset: gharchive for a new database, the recorded value for one that has it', {
    timeout: 240_000,
  }, async () => {
    const unset = env({ COMMIT_EMAILS: undefined });
    // A new database: nothing recorded, nothing stored (the commands above stored pushes).
    await sql`TRUNCATE push_events, stored_commits CASCADE`.execute(t.db);
    expect((await adoptStoredSettings(t.db, loadConfig({}))).commits.emails).toBe('gharchive');
    const fresh = await runBin('setup', [], unset);
    expect(fresh.code, fresh.err).toBe(0);
    expect(fresh.out).toMatch(
      /stored-data settings COMMIT_EMAILS=gharchive, COMMITS_MAX_PER_PUSH=250\n$/,
    );
    expect((await runBin('ingest', [], unset)).code).toBe(0);

    // A database recorded under the old default keeps it: no refusal, no new record.
    await sql`UPDATE stored_settings SET value = 'hash' WHERE name = 'COMMIT_EMAILS'`.execute(t.db);
    const kept = await runBin('ingest', [], unset);
    expect(kept.code, kept.err).toBe(0);
    expect((await recorded()).find((r) => r.name === 'COMMIT_EMAILS')?.value).toBe('hash');
    expect((await adoptStoredSettings(t.db, loadConfig({}))).commits.emails).toBe('hash');
    // Set, the environment still has to agree.
    expect((await runBin('ingest', [], env({ COMMIT_EMAILS: 'gharchive' }))).code).toBe(2);

    // None recorded, but rows stored: they were written under the default of their time.
    await sql`DELETE FROM stored_settings`.execute(t.db);
    await sql`INSERT INTO actors (id, login) VALUES (4242, 'a') ON CONFLICT DO NOTHING`.execute(
      t.db,
    );
    await sql`INSERT INTO repositories (id, full_name) VALUES (4243, 'a/b')
      ON CONFLICT DO NOTHING`.execute(t.db);
    await sql`INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload)
      VALUES (4242, 4243, 'refs/heads/main', 'b', 'h', now(), '{}')`.execute(t.db);
    try {
      expect((await adoptStoredSettings(t.db, loadConfig({}))).commits.emails).toBe('hash');
      const old = await runBin('setup', [], unset);
      expect(old.out).toMatch(
        /stored-data settings COMMIT_EMAILS=hash, COMMITS_MAX_PER_PUSH=250\n$/,
      );
    } finally {
      await sql`DELETE FROM push_events WHERE actor_id = 4242`.execute(t.db);
    }
  });

  it('racing on an empty table, the first value recorded wins and the other refuses', async () => {
    const pools = [0, 1].map(() => createPool(t.url, { max: 1, applicationName: 'race' }));
    try {
      const outcomes = await Promise.allSettled(
        (['hash', 'keep'] as const).map((emails, i) =>
          checkStoredSettings(createDb(pools[i]!), loadConfig({ COMMIT_EMAILS: emails }), 'worker'),
        ),
      );
      const refused = outcomes.filter((o) => o.status === 'rejected');
      expect(refused).toHaveLength(1);
      expect((refused[0] as PromiseRejectedResult).reason).toBeInstanceOf(StoredSettingMismatch);
      expect((refused[0] as PromiseRejectedResult).reason.code).toBe('STORED_SETTING_MISMATCH');
      const winner = (await recorded()).find((r) => r.name === 'COMMIT_EMAILS')!.value;
      expect((refused[0] as PromiseRejectedResult).reason.recorded).toBe(winner);
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
  });

  it('bin/setup --reconfigure changes them on purpose, says so, and warns of running writers', {
    timeout: 240_000,
  }, async () => {
    expect((await runBin('setup', [], env())).code).toBe(0);
    const web = spawnBin('web', env({ WEBHOOK_SECRET: 's', HTTP_PORT: '0', LOG_LEVEL: 'info' }));
    children.push(web);
    await web.waitForLine((l) => l.event === 'web.listening', 'the web to listen', 60_000);

    const r = await runBin(
      'setup',
      ['--reconfigure'],
      env({ COMMIT_EMAILS: 'keep', LOG_LEVEL: 'info', LOG_FORMAT: 'json' }),
    );
    expect(r.code).toBe(0);
    expect(r.out).toBe('setup: stored-data settings COMMIT_EMAILS hash → keep\n');
    const warned = r.err
      .split('\n')
      .filter((l) => l.includes('"setup.reconfigured"'))
      .map((l) => JSON.parse(l));
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({
      level: 'warn',
      changes: [{ setting: 'COMMIT_EMAILS', from: 'hash', to: 'keep' }],
    });
    expect(warned[0].writer_sessions).toBeGreaterThan(0);
    expect(warned[0].msg).toMatch(/restart them with the new values/);
    expect(await recorded()).toEqual([
      { name: 'COMMITS_MAX_PER_PUSH', value: '250', previous_value: null },
      { name: 'COMMIT_EMAILS', value: 'keep', previous_value: 'hash' },
    ]);
    web.process.kill('SIGTERM');
    await web.exited;

    // Now keep is the database's: the old environment is the one refused.
    expect((await runBin('ingest', [], env({ COMMIT_EMAILS: 'keep' }))).code).toBe(0);
    const old = await runBin('ingest', [], env());
    expect(old.code).toBe(2);
    expect(old.err).toMatch(
      /COMMIT_EMAILS is "hash" here, but .* COMMIT_EMAILS="keep" \(recorded \S+ by bin\/setup --reconfigure on /,
    );
    // Reconfiguring to what is recorded changes nothing.
    expect((await runBin('setup', ['--reconfigure'], env({ COMMIT_EMAILS: 'keep' }))).out).toBe(
      'setup: nothing to do, the database is up to date\n',
    );
  });
});
