/**
 * A strict reader of the Prometheus text exposition format (0.0.4), enough to prove that
 * /metrics is something Prometheus will ingest: HELP/TYPE before samples, valid metric and
 * label names, escaped label values, numeric values, samples belonging to a declared
 * family, and histograms that are cumulative with +Inf equal to _count.
 */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Family {
  name: string;
  type: string;
  help: string;
  samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

function parseLabels(text: string, line: string): Record<string, string> {
  const labels: Record<string, string> = {};
  let i = 0;
  while (i < text.length) {
    const eq = text.indexOf('=', i);
    if (eq < 0) throw new Error(`bad labels in: ${line}`);
    const name = text.slice(i, eq).trim();
    if (!LABEL_NAME.test(name)) throw new Error(`bad label name "${name}" in: ${line}`);
    if (text[eq + 1] !== '"') throw new Error(`unquoted label value in: ${line}`);
    let j = eq + 2;
    let value = '';
    for (; j < text.length && text[j] !== '"'; j++) {
      if (text[j] === '\\') {
        const next = text[++j];
        if (next === 'n') value += '\n';
        else if (next === '\\' || next === '"') value += next;
        else throw new Error(`bad escape in: ${line}`);
      } else {
        value += text[j];
      }
    }
    if (text[j] !== '"') throw new Error(`unterminated label value in: ${line}`);
    if (name in labels) throw new Error(`duplicate label ${name} in: ${line}`);
    labels[name] = value;
    i = j + 1;
    if (text[i] === ',') i++;
  }
  return labels;
}

function parseValue(raw: string, line: string): number {
  // Prometheus parses values with Go's ParseFloat: Inf and NaN in any letter case
  // (prom-client writes NaN as "Nan").
  if (/^\+?inf$/i.test(raw)) return Infinity;
  if (/^-inf$/i.test(raw)) return -Infinity;
  if (/^nan$/i.test(raw)) return NaN;
  if (!/^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(raw))
    throw new Error(`bad value "${raw}" in: ${line}`);
  return Number(raw);
}

function familyOf(sampleName: string, families: Map<string, Family>): Family | undefined {
  if (families.has(sampleName)) return families.get(sampleName);
  const m = /^(.*)_(bucket|sum|count)$/.exec(sampleName);
  const f = m ? families.get(m[1]!) : undefined;
  return f && (f.type === 'histogram' || f.type === 'summary') ? f : undefined;
}

export function parsePrometheusText(text: string): Map<string, Family> {
  const families = new Map<string, Family>();
  if (!text.endsWith('\n')) throw new Error('exposition must end with a newline');
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const help = /^# HELP (\S+) (.*)$/.exec(line);
    if (help) {
      const [, name, doc] = help;
      if (!METRIC_NAME.test(name!)) throw new Error(`bad metric name: ${line}`);
      if (families.has(name!)) throw new Error(`family ${name} declared twice`);
      families.set(name!, { name: name!, type: 'untyped', help: doc!, samples: [] });
      continue;
    }
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) {
      const f = families.get(type[1]!);
      if (!f) throw new Error(`TYPE before HELP: ${line}`);
      if (!TYPES.has(type[2]!)) throw new Error(`unknown type: ${line}`);
      f.type = type[2]!;
      continue;
    }
    if (line.startsWith('#')) continue;
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)( \d+)?$/.exec(line);
    if (!sample) throw new Error(`not a sample line: ${line}`);
    const f = familyOf(sample[1]!, families);
    if (!f) throw new Error(`sample of undeclared family: ${line}`);
    f.samples.push({
      name: sample[1]!,
      labels: sample[3] ? parseLabels(sample[3], line) : {},
      value: parseValue(sample[4]!, line),
    });
  }
  for (const f of families.values()) {
    if (f.type === 'counter' && f.samples.some((s) => s.value < 0)) {
      throw new Error(`counter ${f.name} has a negative value`);
    }
    if (f.type === 'histogram') checkHistogram(f);
  }
  return families;
}

function checkHistogram(f: Family): void {
  const series = new Map<string, Sample[]>();
  for (const s of f.samples.filter((x) => x.name.endsWith('_bucket'))) {
    const { le: _le, ...rest } = s.labels;
    const key = JSON.stringify(rest);
    series.set(key, [...(series.get(key) ?? []), s]);
  }
  for (const [key, buckets] of series) {
    const sorted = [...buckets].sort(
      (a, b) => parseValue(a.labels.le!, '') - parseValue(b.labels.le!, ''),
    );
    for (let i = 1; i < sorted.length; i++) {
      if (sorted[i]!.value < sorted[i - 1]!.value)
        throw new Error(`${f.name}${key}: buckets not cumulative`);
    }
    const inf = sorted.at(-1)!;
    if (inf.labels.le !== '+Inf') throw new Error(`${f.name}${key}: no +Inf bucket`);
    const count = f.samples.find(
      (s) => s.name === `${f.name}_count` && JSON.stringify(s.labels) === key,
    );
    if (!count || count.value !== inf.value)
      throw new Error(`${f.name}${key}: _count differs from +Inf`);
  }
}

/** The value of one sample, matched on the given labels (undefined when absent). */
export function sampleValue(
  families: Map<string, Family>,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  const f = familyOf(name, families);
  return f?.samples.find(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  )?.value;
}
