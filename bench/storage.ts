import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createReadStream, createWriteStream, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { pipeline } from 'node:stream/promises';
import { createGunzip, createGzip } from 'node:zlib';
import { generateHourFile } from './lib/archive-gen.ts';
import { backfillFile, freshStore, ROOT } from './lib/bin.ts';
import type { BenchDatabase } from './lib/database.ts';
import type { ResultLog } from './lib/results.ts';
import {
  indexSizes,
  pushesStored,
  storeSizes,
  type TableSize,
  totalBytes,
  vacuumStore,
} from './lib/store-size.ts';

/**
 * Benchmark: bytes a push in Postgres. Each hour file is imported into a fresh store (a
 * database of its own, set up by bin/setup) by the real `bin/backfill FILE`, as a user runs
 * it; the store's tables are vacuumed (what autovacuum leaves) and measured with
 * pg_total_relation_size: push_events with every partition, push_keys, push_commits,
 * commits, actors, repositories (bench/lib/store-size.ts). Bytes ÷ pushes stored.
 *
 * A small file carries each index's fixed pages (metapages, a BRIN's revmap, an empty
 * partition's indexes), so the same file is then imported again, as many times as make
 * BENCH_STORAGE_MARGINAL pushes (default 5,000; one 8 KB index page weighs 15 B a push
 * over 529), each copy with every event id and every 40-hex sha rewritten (new pushes and
 * commits, byte for byte as long; the same actors and repositories, as a store that has
 * seen them): the bytes those copies add ÷ their pushes is the marginal figure, what a
 * push costs a store that is already running.
 *
 * The files: the real hours of docs/performance.md's "Storage" section, read from
 * BENCH_REALDATA (default ../shared/realdata or ../../shared/realdata beside the checkout;
 * a file that is not there is skipped with a note), and a generated hour in the 2024
 * shape: BENCH_STORAGE_PUSHES pushes (default 50,000) with about two commits each inline
 * and short messages (bench/lib/archive-gen.ts).
 */

const SYNTHETIC_PUSHES = Number(process.env.BENCH_STORAGE_PUSHES ?? 50_000);
/** The marginal batch: rewritten copies of the file until at least this many pushes. */
const MARGINAL_PUSHES = Number(process.env.BENCH_STORAGE_MARGINAL ?? 5_000);
const REAL_FILES = [
  'gharchive_2015-01-01-15__sankred9527_fluxus-gharchive-source__tests.json',
  'gharchive_2015-02-01-00-excerpt__quickwit-oss_quickwit__es_compatibility_gharchive-bulk.jsonl',
  'gharchive_2013-10-10-0_oldtimelineformat__npxquynh_data-information-integration__data_gzip.json.gz',
  'gharchive_2013-10-10-15_oldtimelineformat__npxquynh_data-information-integration__data_gzip.json.gz',
  'gharchive_2014-01-01-1_oldtimelineformat__npxquynh_data-information-integration__data_gzip.json.gz',
];

function realDataDir(): string | null {
  const candidates = process.env.BENCH_REALDATA
    ? [process.env.BENCH_REALDATA]
    : [path.resolve(ROOT, '../shared/realdata'), path.resolve(ROOT, '../../shared/realdata')];
  return candidates.find((d) => existsSync(d)) ?? null;
}

const HEX40 = /\b[0-9a-f]{40}\b/g;
const EVENT_ID = /^\{"id":"(\d+)"/;
const CREATED_AT = /"created_at":"([^"]+)"/g;

/**
 * An ISO time `hours` later, written as it was: GH Archive's form (no milliseconds) in UTC,
 * or, for a time with an offset (the timeline format's `-07:00`), the same offset, so each
 * rewritten line keeps its length. Every `created_at` of a line moves, nested ones too (a
 * repository's, in the timeline format): all by the same hours.
 */
function laterBy(at: string, hours: number): string {
  const t = Date.parse(at);
  if (Number.isNaN(t)) return at;
  const offset = /([+-])(\d\d):?(\d\d)$/.exec(at);
  const minutes = offset
    ? (offset[1] === '-' ? -1 : 1) * (Number(offset[2]) * 60 + Number(offset[3]))
    : 0;
  const local = new Date(t + hours * 3_600_000 + minutes * 60_000).toISOString();
  return offset ? local.replace(/\.\d{3}Z$/, offset[0]) : local.replace('.000Z', 'Z');
}

/**
 * Copy number `copy`: the file with every event id moved past the others', every 40-hex
 * string (heads, befores, commit shas, obfuscated e-mail addresses) replaced by another as
 * long, so each push and commit is a new one and each line as long as before, and every
 * created_at `copy` hours later: a copy's pushes are the next hours' pushes to the same
 * repositories and refs, not duplicates of the first's times (which a B-tree would fold
 * into one entry by deduplication).
 */
async function rewrittenCopy(file: string, out: string, copy: number): Promise<void> {
  const gz = file.endsWith('.gz');
  const input = createReadStream(file);
  const lines = createInterface({ input: gz ? input.pipe(createGunzip()) : input });
  const gzip = createGzip({ level: 1 });
  const done = pipeline(gzip, createWriteStream(out));
  for await (const line of lines) {
    const next = line
      .replace(
        EVENT_ID,
        (_, id: string) => `{"id":"${BigInt(id) + BigInt(copy) * 100_000_000_000n}"`,
      )
      .replace(HEX40, (h) => createHash('sha1').update(`copy ${copy}:${h}`).digest('hex'))
      .replace(CREATED_AT, (_, at: string) => `"created_at":"${laterBy(at, copy)}"`);
    if (!gzip.write(`${next}\n`)) await once(gzip, 'drain');
  }
  gzip.end();
  await done;
}

interface Measured {
  pushes: number;
  sizes: TableSize[];
  indexes: Map<string, number>;
}

async function measure(url: string): Promise<Measured> {
  await vacuumStore(url);
  return {
    pushes: await pushesStored(url),
    sizes: await storeSizes(url),
    indexes: await indexSizes(url),
  };
}

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

function table(name: string, first: Measured, second: Measured): string {
  const added = second.pushes - first.pushes;
  const rows = first.sizes.map((s) => {
    const after = second.sizes.find((x) => x.table === s.table)!;
    return `    ${s.table.padEnd(13)} ${fmt(s.total).padStart(12)} B  ${fmt(s.total / first.pushes).padStart(7)} B/push (table ${fmt(s.table_bytes / first.pushes).padStart(6)}, indexes ${fmt(s.index_bytes / first.pushes).padStart(6)})   marginal ${fmt((after.total - s.total) / added).padStart(6)} B/push${s.partitions ? `   ${s.partitions} partition(s)` : ''}`;
  });
  const total = totalBytes(first.sizes);
  const marginal = (totalBytes(second.sizes) - total) / added;
  const indexRows = [...second.indexes].map(
    ([index, bytes]) =>
      `      ${index.padEnd(48)} marginal ${fmt((bytes - (first.indexes.get(index) ?? 0)) / added).padStart(6)} B/push`,
  );
  return [
    `  ${name}: ${fmt(first.pushes)} pushes stored`,
    ...rows,
    '    indexes (each summed over its partitions):',
    ...indexRows,
    `    ${'total'.padEnd(13)} ${fmt(total).padStart(12)} B  ${fmt(total / first.pushes).padStart(7)} B/push${' '.repeat(38)}marginal ${fmt(marginal).padStart(6)} B/push (copies: ${fmt(added)} pushes)`,
  ].join('\n');
}

export async function benchStorage(database: BenchDatabase, results: ResultLog): Promise<string[]> {
  const dir = mkdtempSync(path.join(tmpdir(), 'gpi-bench-storage-'));
  try {
    const files: { name: string; file: string }[] = [];
    const real = realDataDir();
    for (const f of REAL_FILES) {
      const file = real ? path.join(real, f) : null;
      if (file && existsSync(file)) files.push({ name: f.split('__')[0]!, file });
      else results.note(`  storage: ${f} not found (BENCH_REALDATA): skipped`);
    }
    if (SYNTHETIC_PUSHES > 0) {
      const generated = await generateHourFile(path.join(dir, '2024-03-12-14.json.gz'), {
        events: SYNTHETIC_PUSHES * 2,
        hourStart: new Date('2024-03-12T14:00:00Z'),
        commits: 2,
        actorPool: 200_000,
        repoPool: 250_000,
        level: 1,
      });
      files.push({ name: `synthetic 2024 hour, ~2 commits a push`, file: generated.file });
    }
    let n = 0;
    for (const { name, file } of files) {
      const store = await freshStore(database.url, `s${n++}`);
      try {
        const a = await backfillFile(file, store.url);
        const first = await measure(store.url);
        // Copies enough for MARGINAL_PUSHES new pushes: a few hundred would weigh each
        // index page (8 KB) at tens of bytes a push.
        const copies = Math.max(1, Math.ceil(MARGINAL_PUSHES / Math.max(1, first.pushes)));
        let created = 0;
        for (let k = 1; k <= copies; k++) {
          const copy = path.join(dir, `copy-${n}-${k}.json.gz`);
          await rewrittenCopy(file, copy, k);
          created += (await backfillFile(copy, store.url)).created;
          rmSync(copy, { force: true });
        }
        const second = await measure(store.url);
        const added = second.pushes - first.pushes;
        if (added !== created) {
          throw new Error(`storage: the copies stored ${created} but ${added} were added`);
        }
        const total = totalBytes(first.sizes);
        const detail = {
          file,
          pushes: first.pushes,
          read: a.pushes,
          importSeconds: a.seconds,
          tables: Object.fromEntries(
            first.sizes.map((s) => [
              s.table,
              {
                bytes: s.total,
                perPush: s.total / first.pushes,
                tablePerPush: s.table_bytes / first.pushes,
                indexesPerPush: s.index_bytes / first.pushes,
                partitions: s.partitions,
                marginalPerPush:
                  (second.sizes.find((x) => x.table === s.table)!.total - s.total) / added,
              },
            ]),
          ),
          secondBatch: added,
        };
        results.record({
          bench: 'storage',
          metric: `${name}: bytes a push`,
          value: total / first.pushes,
          unit: 'B/push',
          detail,
        });
        results.record({
          bench: 'storage',
          metric: `${name}: marginal bytes a push`,
          value: (totalBytes(second.sizes) - total) / added,
          unit: 'B/push',
          detail,
        });
        results.note(table(name, first, second));
      } finally {
        await store.drop();
      }
    }
    return [];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
