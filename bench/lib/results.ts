import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * Benchmark results: one JSON object per line in bench/results/latest.json (rewritten
 * each run) and one readable line on stdout with the target and PASS/MISS. Targets are
 * reported, never asserted: a MISS does not fail the run (the seq-scan check does).
 */

export type Comparison = '>=' | '<' | '<=' | '==';

export interface Target {
  op: Comparison;
  value: number;
}

export interface Result {
  bench: string;
  metric: string;
  value: number;
  unit: string;
  target?: Target;
  /** Anything that explains the figure (counts, ceilings, the plan). */
  detail?: Record<string, unknown>;
}

export interface RecordedResult extends Result {
  status: 'PASS' | 'MISS' | 'INFO';
  at: string;
}

export const RESULTS_DIR = path.resolve(import.meta.dirname, '../results');

function meets(value: number, t: Target): boolean {
  switch (t.op) {
    case '>=':
      return value >= t.value;
    case '<':
      return value < t.value;
    case '<=':
      return value <= t.value;
    case '==':
      return value === t.value;
  }
}

export function formatNumber(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  if (Math.abs(n) >= 100) return Math.round(n).toLocaleString('en-US');
  if (Math.abs(n) >= 1) return n.toFixed(2);
  return n.toFixed(3);
}

export class ResultLog {
  readonly file: string;
  readonly results: RecordedResult[] = [];

  constructor(file = path.join(RESULTS_DIR, 'latest.json')) {
    this.file = file;
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, '');
  }

  record(r: Result): RecordedResult {
    const status = r.target ? (meets(r.value, r.target) ? 'PASS' : 'MISS') : 'INFO';
    const rec: RecordedResult = { ...r, status, at: new Date().toISOString() };
    this.results.push(rec);
    appendFileSync(this.file, `${JSON.stringify(rec)}\n`);
    const target = r.target
      ? `target ${r.target.op} ${formatNumber(r.target.value)} ${r.unit}`
      : '';
    console.log(
      `${r.bench.padEnd(8)} ${r.metric.padEnd(44)} ${formatNumber(r.value).padStart(12)} ${r.unit.padEnd(10)} ${target.padEnd(26)} ${status}`,
    );
    return rec;
  }

  /** Free-form context lines (plans, notes) go to stdout only. */
  note(text: string): void {
    console.log(text);
  }
}
