import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import { sql } from 'kysely';
import type pg from 'pg';
import { FILE_FORMAT } from '../src/export/cache.ts';
import { HOUR_ROWS } from '../src/export/hour-query.ts';
import {
  builtHour,
  currentSnapshot,
  hourChanges,
  recordBuilt,
  renamedSince,
} from '../src/export/hour-state.ts';
import { inHourSnapshot, writeHour } from '../src/export/write.ts';
import { hourEnd, parseHour } from '../src/store/archive-hours.ts';
import { hourOpenReasons } from '../src/store/open-hours.ts';
import type { BenchDatabase } from './lib/database.ts';
import type { ResultLog } from './lib/results.ts';
import { secondsSince } from './lib/stats.ts';

/**
 * Benchmark: bin/export against the physical ceiling. One hour of PUSHES stored
 * pushes (BENCH_EXPORT_PUSHES, default 100,000; 1000000 for the issue's million-push hour),
 * each with its commits (2.65 on average: 1, 3, 10 or 25), seeded with generate_series.
 * Measured in one run, ROUNDS times back to back:
 *
 * - the ceiling: `COPY (the export's own query) TO STDOUT`, the same rows and joins read
 *   out of Postgres as text, nothing else;
 * - the export: the same rows through the cursor, the lines and gzip (writeHour), bytes
 *   counted and dropped.
 *
 * Both also in CPU seconds (Node's process, and the Postgres backend's from /proc when the
 * server is local), which the machine's load does not move. Then bytes per exported push,
 * what /archive reads per request of a built hour (its ETag and open reasons),
 * and the real bin/export on the hour as a child process with the sampler preloaded: peak
 * RSS and heap, and its file's SHA-256 against the in-process export's (the same bytes
 * from another process).
 */

const PUSHES = Number(process.env.BENCH_EXPORT_PUSHES ?? 100_000);
const ROUNDS = Number(process.env.BENCH_EXPORT_ROUNDS ?? 3);
const HOUR = parseHour('2026-11-20-12')!;
const ROOT = path.resolve(import.meta.dirname, '..');

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * CPU seconds a local Postgres backend has used (/proc/<pid>/stat: utime + stime at 100
 * ticks a second), or null where that cannot be read (another host, not Linux). On a
 * shared machine wall-clock rates move with everyone else's load; CPU seconds do not.
 */
function backendCpu(pid: number): number | null {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return null;
  }
}

const nodeCpu = (since: NodeJS.CpuUsage) => {
  const u = process.cpuUsage(since);
  return (u.user + u.system) / 1e6;
};

function minus(a: number | null, b: number | null): number | null {
  return a === null || b === null ? null : a - b;
}

async function seed(database: BenchDatabase): Promise<{ pushes: number; commits: number }> {
  const db = database.db;
  const actors = Math.max(10, Math.floor(PUSHES / 4));
  const repos = Math.max(10, Math.floor(PUSHES / 3));
  await sql`INSERT INTO actors (id, login) SELECT g, 'bench-user-' || g
    FROM generate_series(1, ${actors}::int) g`.execute(db);
  await sql`INSERT INTO repositories (id, full_name, profile, enrichment_state)
    SELECT g, 'bench-owner-' || (g % 5000) || '/repo-' || g,
      CASE WHEN g % 4 = 0 THEN jsonb_build_object('private', false, 'owner',
        jsonb_build_object('type', 'Organization', 'id', 7000000 + g % 5000, 'login', 'bench-owner-' || (g % 5000)))
      ELSE '{"private": false, "owner": {"type": "User"}}'::jsonb END,
      'enriched'
    FROM generate_series(1, ${repos}::int) g`.execute(db);
  await sql`INSERT INTO push_events (id, actor_id, repository_id, push_id, ref, head, before,
      created_at, payload, origin, commit_count, commits_state)
    SELECT 90000000000 + g, 1 + (g::bigint * 7919) % ${actors}::int, 1 + (g::bigint * 104729) % ${repos}::int,
      30000000000 + g, 'refs/heads/main',
      md5('h' || g) || substr(md5('H' || g), 1, 8), md5('b' || g) || substr(md5('B' || g), 1, 8),
      ${HOUR.start}::timestamptz + (floor((g - 1) * 3600.0 / ${PUSHES}::int) || ' seconds')::interval,
      '{}'::jsonb, 'archive',
      CASE WHEN g % 100 = 0 THEN 25 WHEN g % 10 = 0 THEN 10 WHEN g % 3 = 0 THEN 3 ELSE 1 END,
      'complete'
    FROM generate_series(1, ${PUSHES}::int) g`.execute(db);
  // The table under the commits view (a view's INSERT runs a trigger a row).
  await sql`INSERT INTO stored_commits (repository_id, sha, author_name, author_email, message)
    SELECT p.repository_id, commit_sha_bytes(md5(p.head || i) || substr(md5(p.head || 'x' || i), 1, 8)),
      'Developer ' || (p.actor_id % 97), 'sha256:' || encode(sha256(('dev' || (p.actor_id % 97))::bytea), 'hex'),
      'Change ' || i || ' of ' || p.commit_count || ': tidy up the module and its tests'
    FROM push_events p, generate_series(0, p.commit_count - 1) i`.execute(db);
  await sql`INSERT INTO push_commits (repository_id, ref, before, head, position, sha, "distinct")
    SELECT p.repository_id, p.ref, p.before, p.head, i,
      md5(p.head || i) || substr(md5(p.head || 'x' || i), 1, 8), i % 7 <> 6
    FROM push_events p, generate_series(0, p.commit_count - 1) i`.execute(db);
  await sql`ANALYZE`.execute(db);
  const n = await sql<{ n: string }>`SELECT count(*) AS n FROM push_commits`.execute(db);
  return { pushes: PUSHES, commits: Number(n.rows[0]!.n) };
}

/** `COPY (query) TO STDOUT` on a raw client, the bytes counted and dropped. */
function copyOut(client: pg.PoolClient, text: string): Promise<{ rows: number; bytes: number }> {
  let bytes = 0;
  let rows = 0;
  return new Promise((resolve, reject) => {
    let error: Error | null = null;
    const submittable = {
      submit(connection: { query(text: string): void }) {
        connection.query(text);
      },
      handleCopyData(msg: { chunk: Buffer }) {
        bytes += msg.chunk.length;
      },
      handleCommandComplete(msg: { text: string }) {
        rows = Number(/(\d+)$/.exec(msg.text)?.[1] ?? 0);
      },
      handleError(err: Error) {
        error = err;
        reject(err);
      },
      handleReadyForQuery() {
        if (error) reject(error);
        else resolve({ rows, bytes });
      },
      handleRowDescription() {},
      handleDataRow() {},
      handleEmptyQuery() {},
      handlePortalSuspended() {},
      handleCopyInResponse() {},
    };
    (client as unknown as { query(q: unknown): unknown }).query(submittable);
  });
}

function literal(d: Date): string {
  return `'${d.toISOString()}'::timestamptz`;
}

async function exportOnce(database: BenchDatabase) {
  let bytes = 0;
  const hash = createHash('sha256');
  const sink = new Writable({
    write(c: Buffer, _e, cb) {
      bytes += c.length;
      hash.update(c);
      cb();
    },
  });
  const t0 = performance.now();
  let pgCpu: number | null = null;
  let node = 0;
  const file = await inHourSnapshot(database.db, async (run) => {
    const pid = (await run<{ pid: number }>('SELECT pg_backend_pid() AS pid'))[0]!.pid;
    const cpu0 = backendCpu(pid);
    const n0 = process.cpuUsage();
    const written = await writeHour(run, HOUR, sink);
    node = nodeCpu(n0);
    pgCpu = minus(backendCpu(pid), cpu0);
    return written;
  });
  return {
    seconds: secondsSince(t0),
    file,
    bytes,
    sha256: hash.digest('hex'),
    pgCpu,
    nodeCpu: node,
  };
}

interface Sample {
  event: string;
  rss: number;
  heapUsed: number;
}

/** The real bin/export on the hour, the sampler preloaded; Node's memory defaults of bin/*. */
async function childExport(database: BenchDatabase, out: string) {
  const child = spawn(
    process.execPath,
    [
      '--import',
      path.join(ROOT, 'bench/lib/sampler.ts'),
      path.join(ROOT, 'bin/export'),
      HOUR.name,
      '--out',
      out,
      '--json',
    ],
    {
      cwd: ROOT,
      env: {
        ...process.env,
        DATABASE_URL: database.url,
        LOG_LEVEL: 'warn',
        SAMPLE_INTERVAL_MS: '200',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const samples: Sample[] = [];
  let stdout = '';
  let pending = '';
  child.stdout.on('data', (c: Buffer) => {
    stdout += c.toString();
  });
  child.stderr.on('data', (c: Buffer) => {
    pending += c.toString();
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.includes('process.sample')) continue;
      try {
        samples.push(JSON.parse(line) as Sample);
      } catch {}
    }
  });
  const t0 = performance.now();
  const [code] = (await once(child, 'exit')) as [number | null];
  const seconds = secondsSince(t0);
  if (code !== 0) throw new Error(`bin/export exited ${code}: ${stdout}`);
  return {
    seconds,
    peakMb: Math.max(...samples.map((s) => s.rss)) / 2 ** 20,
    peakHeapMb: Math.max(...samples.map((s) => s.heapUsed)) / 2 ** 20,
    samples: samples.length,
    result: JSON.parse(stdout) as { files: { sha256: string; bytes: number; pushes: number }[] },
  };
}

/**
 * The real bin/web over HTTP on the seeded hour: the first GET builds the file, then what
 * every later request costs — revalidations (304), HEADs, and GETs served from the cache —
 * each sequential, and the median taken. The figure of record for /archive's per-request
 * cost: nothing in it reads the hour's rows.
 */
async function webArchive(database: BenchDatabase, results: ResultLog, pushes: number) {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'gpi-bench-web-'));
  const child = spawn(process.execPath, [path.join(ROOT, 'bin/web')], {
    cwd: ROOT,
    env: {
      ...process.env,
      DATABASE_URL: database.url,
      HTTP_HOST: '127.0.0.1',
      HTTP_PORT: '0',
      DATA_DIR: dataDir,
      LOG_FORMAT: 'json',
      LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  try {
    const url = await new Promise<string>((resolve, reject) => {
      let pending = '';
      child.once('exit', (code) => reject(new Error(`bin/web exited ${code}`)));
      child.stderr.on('data', (c: Buffer) => {
        pending += c.toString();
        const m = /"event":"web\.listening","url":"([^"]+)"/.exec(pending);
        if (m) resolve(m[1]!);
      });
    });
    const file = `${url}/archive/${HOUR.name}.json.gz`;
    const b0 = performance.now();
    const first = await fetch(file);
    await first.arrayBuffer();
    const buildSeconds = secondsSince(b0);
    const etag = first.headers.get('etag')!;
    const timed = async (n: number, req: () => Promise<Response>) => {
      const ms: number[] = [];
      for (let i = 0; i < n; i++) {
        const t = performance.now();
        const res = await req();
        await res.arrayBuffer();
        ms.push(performance.now() - t);
      }
      return median(ms);
    };
    const revalidate = await timed(100, () => fetch(file, { headers: { 'if-none-match': etag } }));
    const head = await timed(100, () => fetch(file, { method: 'HEAD' }));
    const get = await timed(10, () => fetch(file));
    results.record({
      bench: 'export',
      metric: `bin/web /archive, a built ${pushes.toLocaleString('en-US')}-push hour: revalidation (304), median over HTTP`,
      value: revalidate,
      unit: 'ms',
      detail: { headMs: head, getFromCacheMs: get, firstGetBuildSeconds: buildSeconds },
    });
    results.note(
      `  bin/web /archive: first GET (build) ${buildSeconds.toFixed(1)} s; then 304 ${revalidate.toFixed(1)} ms, HEAD ${head.toFixed(1)} ms, GET from cache ${get.toFixed(0)} ms (medians)`,
    );
  } finally {
    child.kill('SIGTERM');
    if (child.exitCode === null) await once(child, 'exit');
    rmSync(dataDir, { recursive: true, force: true });
  }
}

export async function benchExport(database: BenchDatabase, results: ResultLog): Promise<string[]> {
  const t0 = performance.now();
  const seeded = await seed(database);
  results.note(
    `  seeded ${seeded.pushes.toLocaleString('en-US')} pushes and ${seeded.commits.toLocaleString('en-US')} commits in ${secondsSince(t0).toFixed(0)} s`,
  );
  const copyQuery = HOUR_ROWS.replace('$1', literal(HOUR.start)).replace(
    '$2',
    literal(hourEnd(HOUR)),
  );
  const copyRates: number[] = [];
  const exportRates: number[] = [];
  const copyCpu: (number | null)[] = [];
  const exportPgCpu: (number | null)[] = [];
  const exportNodeCpu: number[] = [];
  let copyBytes = 0;
  let last: Awaited<ReturnType<typeof exportOnce>> | null = null;
  for (let round = 0; round < ROUNDS; round++) {
    const client = await database.pool.connect();
    try {
      const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!
        .pid;
      const cpu0 = backendCpu(pid);
      const c0 = performance.now();
      const copied = await copyOut(client, `COPY (${copyQuery}) TO STDOUT`);
      if (copied.rows !== seeded.pushes) throw new Error(`COPY read ${copied.rows} rows`);
      copyRates.push(copied.rows / secondsSince(c0));
      copyCpu.push(minus(backendCpu(pid), cpu0));
      copyBytes = copied.bytes;
    } finally {
      client.release();
    }
    const e = await exportOnce(database);
    if (e.file.pushes !== seeded.pushes) throw new Error(`export wrote ${e.file.pushes} lines`);
    if (last && last.sha256 !== e.sha256) throw new Error('two exports of the same hour differ');
    exportRates.push(e.file.pushes / e.seconds);
    exportPgCpu.push(e.pgCpu);
    exportNodeCpu.push(e.nodeCpu);
    last = e;
  }
  const ratios = exportRates.map((r, i) => r / copyRates[i]!);
  const detail = {
    pushes: seeded.pushes,
    commits: seeded.commits,
    rounds: ROUNDS,
    copyRates,
    exportRates,
    ratios,
  };
  results.record({
    bench: 'export',
    metric: 'export of an hour: pushes/s',
    value: median(exportRates),
    unit: 'pushes/s',
    detail,
  });
  results.record({
    bench: 'export',
    metric: 'COPY (the same query) TO STDOUT: rows/s',
    value: median(copyRates),
    unit: 'rows/s',
    detail: { copyBytesPerRow: copyBytes / seeded.pushes },
  });
  results.record({
    bench: 'export',
    metric: 'export / COPY ratio (median of rounds)',
    value: median(ratios),
    unit: '×',
    detail,
  });
  // In CPU seconds, which the load does not move: on a saturated machine the two sides
  // add up, on an idle one Node's side and Postgres's overlap (docs/performance.md).
  const cp = median(copyCpu.map((x) => x ?? Number.NaN));
  const ep = median(exportPgCpu.map((x) => x ?? Number.NaN));
  const en = median(exportNodeCpu);
  if (Number.isFinite(cp) && Number.isFinite(ep)) {
    const cpuDetail = { copyCpu, exportPgCpu, exportNodeCpu };
    results.record({
      bench: 'export',
      metric: 'COPY: Postgres CPU seconds',
      value: cp,
      unit: 's',
      detail: cpuDetail,
    });
    results.record({
      bench: 'export',
      metric: 'export: Postgres CPU seconds',
      value: ep,
      unit: 's',
      detail: cpuDetail,
    });
    results.record({
      bench: 'export',
      metric: 'export: Node CPU seconds (gzip included)',
      value: en,
      unit: 's',
      detail: cpuDetail,
    });
    results.record({
      bench: 'export',
      metric: 'CPU ratio, saturated: COPY / (Node + Postgres)',
      value: cp / (en + ep),
      unit: '×',
    });
    results.record({
      bench: 'export',
      metric: 'CPU ratio, idle: COPY / max(Node, Postgres)',
      value: cp / Math.max(en, ep),
      unit: '×',
    });
  }
  results.record({
    bench: 'export',
    metric: 'bytes per exported push (gzip)',
    value: last!.bytes / seeded.pushes,
    unit: 'B/push',
    detail: { fileMB: last!.bytes / 1e6, commitsListed: last!.file.commits },
  });

  // What /archive reads per request of a built hour before it can answer (its ETag, and
  // whether it is final): the hour's change count, its recorded file, its open reasons and
  // the renames since (src/export/cache.ts), none of them a read of the hour's rows. A
  // function-level diagnostic: the figure of record is bin/web's, over HTTP.
  await recordBuilt(database.db, HOUR, FILE_FORMAT, {
    changes: '0',
    snapshot: (await inHourSnapshot(database.db, currentSnapshot)) as string,
    sha256: last!.sha256,
    bytes: last!.bytes,
    pushes: seeded.pushes,
    pending: 0,
  });
  const LOOKUPS = 200;
  const f0 = performance.now();
  for (let i = 0; i < LOOKUPS; i++) {
    await inHourSnapshot(database.db, async (run) => {
      await hourOpenReasons(run, HOUR, new Date());
      await hourChanges(run, HOUR);
      const built = await builtHour(run, HOUR, FILE_FORMAT);
      await renamedSince(run, HOUR, built!.snapshot);
    });
  }
  results.record({
    bench: 'export',
    metric: 'state /archive reads per request of a built hour (function-level diagnostic)',
    value: (secondsSince(f0) * 1000) / LOOKUPS,
    unit: 'ms',
    detail: { lookups: LOOKUPS },
  });

  await webArchive(database, results, seeded.pushes);

  const dir = mkdtempSync(path.join(tmpdir(), 'gpi-bench-export-'));
  try {
    const child = await childExport(database, dir);
    const written = readFileSync(path.join(dir, `${HOUR.name}.json.gz`));
    const same = createHash('sha256').update(written).digest('hex') === last!.sha256;
    if (!same) throw new Error('bin/export wrote other bytes than the in-process export');
    results.record({
      bench: 'export',
      metric: `peak RSS of bin/export, ${seeded.pushes.toLocaleString('en-US')}-push hour`,
      value: child.peakMb,
      unit: 'MB',
      detail: {
        seconds: child.seconds,
        pushesPerSecond: seeded.pushes / child.seconds,
        peakHeapMb: child.peakHeapMb,
        samples: child.samples,
        bytes: written.length,
        sameBytes: same,
      },
    });
    results.note(
      `  bin/export: ${child.seconds.toFixed(1)} s, peak heap ${child.peakHeapMb.toFixed(0)} MB, ${(written.length / 1e6).toFixed(1)} MB file, same bytes as in-process: ${same}`,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  results.note(
    `  rounds: export ${exportRates.map((r) => Math.round(r)).join(', ')} pushes/s, COPY ${copyRates.map((r) => Math.round(r)).join(', ')} rows/s, ratios ${ratios.map((r) => r.toFixed(2)).join(', ')}`,
  );
  return [];
}
