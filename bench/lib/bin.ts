import { spawn } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { secondsSince } from './stats.ts';

/**
 * The real commands as a user runs them (bin/setup, bin/backfill, bin/export, bin/web),
 * each a child process of the bench on a database of its choosing: the storage and
 * growth benchmarks take their figures from these processes, not from functions called
 * in the bench's own.
 */

export const ROOT = path.resolve(import.meta.dirname, '../..');

export interface BinRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** Wall-clock seconds from spawn to exit, Node's start included. */
  seconds: number;
}

export function binEnv(url: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return { ...process.env, DATABASE_URL: url, LOG_LEVEL: 'warn', ...extra };
}

/** Runs bin/<name> to its end; throws, with what it printed, unless it exits 0. */
export async function runBin(
  name: string,
  args: string[],
  url: string,
  extra: Record<string, string> = {},
): Promise<BinRun> {
  const t0 = performance.now();
  const child = spawn(process.execPath, [path.join(ROOT, 'bin', name), ...args], {
    cwd: ROOT,
    env: binEnv(url, extra),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => {
    stdout += c.toString();
  });
  child.stderr.on('data', (c: Buffer) => {
    stderr += c.toString();
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  const run = { code, stdout, stderr, seconds: secondsSince(t0) };
  if (code !== 0) {
    throw new Error(`bin/${name} ${args.join(' ')} exited ${code}:\n${stdout}\n${stderr}`);
  }
  return run;
}

export interface BackfillRun extends BinRun {
  created: number;
  pushes: number;
}

/** `bin/backfill FILE --json`: the pushes it read and stored. */
export async function backfillFile(file: string, url: string): Promise<BackfillRun> {
  const run = await runBin('backfill', [file, '--json'], url);
  const parsed = JSON.parse(run.stdout) as {
    results: { outcome: string; counts: { pushes: number; created: number } }[];
  };
  const r = parsed.results[0]!;
  if (r.outcome !== 'completed') throw new Error(`bin/backfill ${file}: ${r.outcome}`);
  return { ...run, created: r.counts.created, pushes: r.counts.pushes };
}

export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

/** One statement on a connection of its own (CREATE/DROP DATABASE cannot share one). */
export async function adminQuery(url: string, text: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  await client.connect();
  try {
    await client.query(text);
  } finally {
    await client.end();
  }
}

/**
 * A fresh database beside the bench's, set up by bin/setup as a user sets one up. Named by
 * the test harness's run-stamped convention (`gpi_<epoch36>_<tag>_bench`), so one a killed
 * run leaves behind is swept after 3 hours; `drop()` removes it.
 */
export async function freshStore(
  benchUrl: string,
  tag: string,
): Promise<{ url: string; drop(): Promise<void> }> {
  const admin = process.env.BENCH_ADMIN_URL ?? withDatabase(benchUrl, 'postgres');
  const name = `gpi_${Math.floor(Date.now() / 1000).toString(36)}_${tag}_bench`;
  await adminQuery(admin, `CREATE DATABASE ${name}`);
  const url = withDatabase(admin, name);
  const drop = () => adminQuery(admin, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  try {
    await runBin('setup', [], url, { SOURCES: 'public' });
  } catch (err) {
    await drop();
    throw err;
  }
  return { url, drop };
}
