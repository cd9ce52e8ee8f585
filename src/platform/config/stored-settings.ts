import os from 'node:os';
import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { ConfigError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { COMMIT_EMAIL_MODES, type CommitEmailMode, type Config } from './config.ts';

/**
 * One configuration per database for what shapes stored data (ADR 0125).
 * COMMIT_EMAILS decides whether `commits.author_email` holds clear addresses, their hashes
 * or nothing; COMMITS_MAX_PER_PUSH how many commits a fetched push keeps. Two workers that
 * disagree would mix both in one table, and nothing could tell the rows apart afterwards.
 * So the first bin/setup records the values in `stored_settings`; every process that writes
 * pushes or commits compares its environment with them before it starts, and one that
 * disagrees refuses (exit 2) with one line naming both values and the way to change them on
 * purpose: `bin/setup --reconfigure`.
 *
 * A new setting that shapes stored data is one more entry of STORED_SETTINGS. A secret (a
 * hash salt, should one come) is recorded as its SHA-256 fingerprint, never as itself.
 */

export interface StoredSetting {
  /** The environment variable. */
  name: string;
  /** This process's value, as it is recorded. */
  value(config: Config): string;
}

export const STORED_SETTINGS: readonly StoredSetting[] = [
  { name: 'COMMIT_EMAILS', value: (c) => c.commits.emails },
  { name: 'COMMITS_MAX_PER_PUSH', value: (c) => String(c.commits.maxPerPush) },
];

/** Where to read how, in one place (every refusal names it). */
export const RECONFIGURE_HINT =
  'bin/setup --reconfigure (docs/configuration.md#one-configuration-per-database)';

/** This process's environment says otherwise than the database: it does not start (exit 2). */
export class StoredSettingMismatch extends ConfigError {
  readonly here: string;
  readonly recorded: string;
  constructor(
    setting: string,
    here: string,
    recorded: { value: string; recordedAt: Date; recordedBy: string },
  ) {
    super(
      setting,
      `is ${JSON.stringify(here)} here, but this database's stored data is shaped by ${setting}=${JSON.stringify(recorded.value)} (recorded ${recorded.recordedAt.toISOString()} by ${recorded.recordedBy}): set ${setting}=${recorded.value}, or change the database's setting on purpose with ${RECONFIGURE_HINT}`,
      'STORED_SETTING_MISMATCH',
    );
    this.here = here;
    this.recorded = recorded.value;
    Object.assign(this.context, { here, recorded: recorded.value });
  }
}

export interface SettingChange {
  name: string;
  from: string | null;
  to: string;
}

/** "bin/setup on host:1234": who recorded a value (`role` is the process's, e.g. setup). */
export function recorder(role: string): string {
  return `bin/${role} on ${os.hostname()}:${process.pid}`.slice(0, 300);
}

/**
 * The configuration this process runs with on `db`: COMMIT_EMAILS, when the environment does
 * not set it, is what the database recorded: a new default applies to new databases only,
 * never to one whose rows were written under another. A database with no
 * record but with pushes or commits was written before stored settings existed, under the
 * default of that time, `hash`; an empty one takes the default. Call before
 * checkStoredSettings, on a database set up (stored_settings exists).
 */
export async function adoptStoredSettings(db: Db, config: Config): Promise<Config> {
  if (config.commits.emailsGiven) return config;
  const row = await db
    .selectFrom('stored_settings')
    .select('value')
    .where('name', '=', 'COMMIT_EMAILS')
    .executeTakeFirst();
  let emails = row?.value;
  if (emails === undefined) {
    const r = await sql<{ held: boolean }>`
      SELECT EXISTS (SELECT 1 FROM push_events) OR EXISTS (SELECT 1 FROM stored_commits) AS held`.execute(
      db,
    );
    if (r.rows[0]?.held) emails = 'hash';
  }
  if (emails === undefined || emails === config.commits.emails) return config;
  if (!(COMMIT_EMAIL_MODES as readonly string[]).includes(emails)) return config;
  return Object.freeze({
    ...config,
    commits: Object.freeze({ ...config.commits, emails: emails as CommitEmailMode }),
  });
}

/**
 * Records this process's value of every setting the database has none for yet (a database
 * set up before stored_settings existed, or a new setting), then compares: the first value
 * recorded wins, even against a process racing this one, and any disagreement is a
 * StoredSettingMismatch (the first one, by STORED_SETTINGS order). Returns what it recorded.
 */
export async function checkStoredSettings(
  db: Db,
  config: Config,
  role: string,
): Promise<SettingChange[]> {
  const mine = STORED_SETTINGS.map((s) => ({ name: s.name, value: s.value(config) }));
  const by = recorder(role);
  const inserted = await db
    .insertInto('stored_settings')
    .values(mine.map((m) => ({ ...m, recorded_by: by })))
    .onConflict((oc) => oc.column('name').doNothing())
    .returning(['name', 'value'])
    .execute();
  const rows = await db
    .selectFrom('stored_settings')
    .select(['name', 'value', 'recorded_at', 'recorded_by'])
    .where(
      'name',
      'in',
      mine.map((m) => m.name),
    )
    .execute();
  const recorded = new Map(rows.map((r) => [r.name, r]));
  for (const m of mine) {
    const r = recorded.get(m.name);
    if (r && r.value !== m.value) {
      throw new StoredSettingMismatch(m.name, m.value, {
        value: r.value,
        recordedAt: r.recorded_at,
        recordedBy: r.recorded_by,
      });
    }
  }
  const order = (name: string) => mine.findIndex((m) => m.name === name);
  return inserted
    .map((r) => ({ name: r.name, from: null, to: r.value }))
    .sort((a, b) => order(a.name) - order(b.name));
}

/**
 * bin/setup --reconfigure: this process's values become the database's, the old ones kept
 * in previous_value. Rows already stored keep the shape they were written with,
 * except addresses, which bin/setup puts under a stricter COMMIT_EMAILS before it calls
 * this (src/store/rewrite-addresses.ts).
 */
export async function reconfigureStoredSettings(
  db: Db,
  config: Config,
  role: string,
): Promise<SettingChange[]> {
  const by = recorder(role);
  return db.transaction().execute(async (trx) => {
    const changes: SettingChange[] = [];
    for (const s of STORED_SETTINGS) {
      const value = s.value(config);
      const before = await trx
        .selectFrom('stored_settings')
        .select('value')
        .where('name', '=', s.name)
        .forUpdate()
        .executeTakeFirst();
      if (before?.value === value) continue;
      await trx
        .insertInto('stored_settings')
        .values({ name: s.name, value, recorded_by: by, previous_value: before?.value ?? null })
        .onConflict((oc) =>
          oc.column('name').doUpdateSet({
            value,
            recorded_by: by,
            recorded_at: sql`now()`,
            previous_value: before?.value ?? null,
          }),
        )
        .execute();
      changes.push({ name: s.name, from: before?.value ?? null, to: value });
    }
    return changes;
  });
}

/**
 * Database sessions of processes that write with their own settings (worker, web, npm
 * start, a gap fill) connected now: after a --reconfigure they go on with the old values
 * until restarted.
 */
export async function writerSessions(db: Db): Promise<number> {
  const r = await sql<{ n: number }>`
    SELECT count(DISTINCT pid)::int AS n FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND application_name IN ('gpi-worker', 'gpi-web', 'gpi-start', 'gpi-backfill-fill')`.execute(
    db,
  );
  return r.rows[0]?.n ?? 0;
}

/** One info line for values recorded because the database had none (first setup or start). */
export function logRecorded(logger: Logger, recorded: readonly SettingChange[]): void {
  const text = recorded.map((r) => `${r.name}=${r.to}`).join(', ');
  logger.info(
    {
      event: 'setup.settings_recorded',
      settings: Object.fromEntries(recorded.map((r) => [r.name, r.to])),
    },
    `stored-data settings recorded for this database: ${text}`,
  );
}
