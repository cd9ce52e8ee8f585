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

const rows = [...read('latest.json'), ...read('soak.json')].filter((r) => r.bench !== 'machine');
console.log('| benchmark | figure | value | target | |');
console.log('|---|---|---:|---|---|');
for (const r of rows) {
  const target = r.target ? `${r.target.op} ${formatNumber(r.target.value)} ${r.unit}` : '';
  console.log(
    `| ${r.bench} | ${r.metric} | ${formatNumber(r.value)} ${r.unit} | ${target} | ${r.status === 'INFO' ? '' : r.status} |`,
  );
}
