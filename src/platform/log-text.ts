/**
 * pino's JSON line as a line a person reads in a terminal:
 *
 *   08:16:00 INFO  run 12 completed for source 1: 81 new  ingestion.run_completed run_id=12
 *
 * time (local, to the second), level, the message, then the event and the other fields
 * as key=value (objects as compact JSON). An error's stack, when the line has one, follows
 * indented. Written by hand rather than with pino-pretty: it is this one function, and a
 * CLI should not pull a second logging stack in for it.
 */

const LEVEL_COLOR: Record<string, string> = {
  trace: '90',
  debug: '90',
  info: '32',
  warn: '33',
  error: '31',
  fatal: '35',
};

const HIDDEN = new Set(['level', 'time', 'pid', 'hostname', 'msg', 'event', 'err']);

function paint(text: string, code: string, color: boolean): string {
  return color ? `\x1b[${code}m${text}\x1b[0m` : text;
}

function value(v: unknown): string {
  if (typeof v === 'string') return /[\s"=]/.test(v) || v === '' ? JSON.stringify(v) : v;
  return JSON.stringify(v);
}

function clock(time: unknown): string {
  const d = typeof time === 'string' || typeof time === 'number' ? new Date(time) : new Date();
  if (Number.isNaN(d.getTime())) return '--:--:--';
  return [d.getHours(), d.getMinutes(), d.getSeconds()]
    .map((n) => String(n).padStart(2, '0'))
    .join(':');
}

export function formatLogLine(json: string, { color = false }: { color?: boolean } = {}): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json.endsWith('\n') ? json : `${json}\n`;
  }
  const level = String(o.level ?? 'info');
  const head = `${paint(clock(o.time), '2', color)} ${paint(level.toUpperCase().padEnd(5), LEVEL_COLOR[level] ?? '0', color)}`;
  const fields: string[] = [];
  if (typeof o.event === 'string') fields.push(o.event);
  const err = o.err as Record<string, unknown> | undefined;
  if (err && typeof err === 'object') {
    const summary = [err.type, err.code ? `[${String(err.code)}]` : '', err.message]
      .filter(Boolean)
      .join(' ');
    fields.push(`err=${value(summary)}`);
  }
  for (const [k, v] of Object.entries(o)) {
    if (!HIDDEN.has(k) && v !== undefined) fields.push(`${k}=${value(v)}`);
  }
  const tail = fields.length > 0 ? `  ${paint(fields.join(' '), '2', color)}` : '';
  const stack =
    err && typeof err.stack === 'string'
      ? `\n${err.stack
          .split('\n')
          .map((l) => `    ${l}`)
          .join('\n')}`
      : '';
  return `${head} ${String(o.msg ?? '')}${tail}${stack}\n`;
}
