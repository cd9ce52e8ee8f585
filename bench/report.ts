import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { formatNumber, RESULTS_DIR, type RecordedResult } from './lib/results.ts';

/**
 * `node bench/report.ts`: the latest results (latest.json, then soak.json) as the
 * Markdown table kept in docs/performance.md.
 */

function read(file: string): RecordedResult[] {
  const p = path.join(RESULTS_DIR, file);
  if (!existsSync(p)) return [];
  return readFileSync(p, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as RecordedResult);
}

/** What the bench's own process calls, for the figures that are function-level diagnostics. */
const CALLS: Record<string, string> = {
  ingest: '`pollDueSources`, the page store, COPY',
  watch: '`pollDueSources`',
  enrich: '`enrichCycle` runners',
  hot: 'the queries',
  backfill: '`importFile`, COPY',
  export: '`writeHour`, COPY',
  status: 'the web server in the bench, over HTTP',
  commits: '`fetchCycle`, `storeCommits`',
  'commits-graphql': 'the GraphQL rounds',
};

/**
 * Which process produced a figure: one a user runs (a child process of the bench), or the
 * bench's own process calling the project's functions — a diagnostic, and said so.
 */
function sourceOf(r: RecordedResult): string {
  if (r.bench === 'soak' || r.bench === 'watch-worker') return 'the `bin/worker` process';
  if (r.bench === 'backfill' && r.metric.startsWith('peak RSS'))
    return 'the `bin/backfill` process';
  if (r.bench === 'export' && r.metric.startsWith('peak RSS of bin/export'))
    return 'the `bin/export` process';
  const calls = CALLS[r.bench];
  return calls ? `function-level: ${calls}` : 'function-level';
}

const rows = [...read('latest.json'), ...read('soak.json')].filter((r) => r.bench !== 'machine');
console.log('| benchmark | figure | value | target | | from |');
console.log('|---|---|---:|---|---|---|');
for (const r of rows) {
  const target = r.target ? `${r.target.op} ${formatNumber(r.target.value)} ${r.unit}` : '';
  console.log(
    `| ${r.bench} | ${r.metric} | ${formatNumber(r.value)} ${r.unit} | ${target} | ${r.status === 'INFO' ? '' : r.status} | ${sourceOf(r)} |`,
  );
}
