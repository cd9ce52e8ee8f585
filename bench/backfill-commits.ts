import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { localFileSource } from '../src/backfill/archive.ts';
import { importFile } from '../src/backfill/import.ts';
import { createLogger } from '../src/platform/log.ts';
import { forgetCommitsTargets } from '../src/store/commits-targets.ts';
import { generateHourFile } from './lib/archive-gen.ts';
import type { BenchDatabase } from './lib/database.ts';
import type { ResultLog } from './lib/results.ts';
import { secondsSince } from './lib/stats.ts';

/**
 * Part of benchmark 5 (ADR 0112): what it costs a backfill that the public
 * source's commits are on, so that every push it stores is `pending` (due now: both partial
 * indexes of pending pushes take a row) instead of `skipped`. The same hour file is
 * imported with the public source's commits off and on, alternately, ROUNDS times; the
 * figure is the median of the rounds' on/off ratios (the machine is shared: a burst of
 * someone else's load lands on one round, not on one side).
 */

const EVENTS = Number(process.env.BENCH_BACKFILL_EVENTS ?? 100_000);
const ROUNDS = Number(process.env.BENCH_BACKFILL_ROUNDS ?? 5);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export async function benchBackfillCommits(
  database: BenchDatabase,
  results: ResultLog,
): Promise<string[]> {
  const dir = mkdtempSync(path.join(tmpdir(), 'gpi-bench-backfill-commits-'));
  const { db } = database;
  try {
    const generated = await generateHourFile(path.join(dir, '2026-11-21-10.json.gz'), {
      events: EVENTS,
      hourStart: new Date('2026-11-21T10:00:00Z'),
    });
    await sql`TRUNCATE event_sources CASCADE`.execute(db);
    await sql`INSERT INTO event_sources (kind, target, mode, commits_enabled)
      VALUES ('public', NULL, 'live', false)`.execute(db);
    // With the database (as bin/backfill runs it): the targets are read, once per file.
    const deps = { pool: database.pool, db, logger: createLogger('silent'), workerId: 'bench' };
    const rates = { off: [] as number[], on: [] as number[] };
    const pending = { off: 0, on: 0 };
    for (let round = 0; round < ROUNDS; round++) {
      for (const side of round % 2 === 0 ? (['off', 'on'] as const) : (['on', 'off'] as const)) {
        await sql`TRUNCATE push_events, actors, repositories, backfill_files`.execute(db);
        await sql`CHECKPOINT`.execute(db);
        await sql`UPDATE event_sources SET commits_enabled = ${side === 'on'}`.execute(db);
        forgetCommitsTargets(db);
        const t0 = performance.now();
        const r = await importFile(deps, localFileSource(generated.file), {
          scope: 'all',
          sourceId: null,
          gapId: null,
        });
        const seconds = secondsSince(t0);
        if (r.outcome !== 'completed' || r.counts.created !== generated.pushes) {
          throw new Error(
            `backfill commits bench: expected ${generated.pushes} pushes, got ${r.counts.created} (${r.outcome})`,
          );
        }
        rates[side].push(generated.pushes / seconds);
        pending[side] = r.commitsPending;
      }
    }
    const ratios = rates.on.map((on, i) => on / rates.off[i]!);
    const detail = { pushes: generated.pushes, rounds: ROUNDS, rates, pending, ratios };
    results.record({
      bench: 'backfill',
      metric: "backfill, the public source's commits off: pushes/s",
      value: median(rates.off),
      unit: 'pushes/s',
      detail,
    });
    results.record({
      bench: 'backfill',
      metric: "backfill, the public source's commits on: pushes/s",
      value: median(rates.on),
      unit: 'pushes/s',
      detail,
    });
    results.record({
      bench: 'backfill',
      metric: 'commits on / off rate (median of rounds)',
      value: median(ratios),
      unit: '×',
      detail,
    });
    results.note(
      `  public commits off/on: ${pending.off}/${pending.on} of ${generated.pushes} pushes pending; rounds off ${rates.off.map(Math.round).join(', ')}, on ${rates.on.map(Math.round).join(', ')} pushes/s`,
    );
    return [];
  } finally {
    await sql`TRUNCATE event_sources CASCADE`.execute(db);
    forgetCommitsTargets(db);
    rmSync(dir, { recursive: true, force: true });
  }
}
