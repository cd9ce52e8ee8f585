import { sql } from 'kysely';
import { InvalidSource, type SourceSpec, sourceSpec } from '../platform/config/source-spec.ts';
import type { GithubMode, SourceKind } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import { AppError } from '../platform/errors.ts';
import { escapeUnsafe } from '../platform/quote.ts';

/**
 * Many sources at once: one source a line in the SOURCES form
 * (`repo:octocat/Hello-World`, `org:github`, `user:torvalds`, `public`) or the form
 * `bin/sources add` takes (`repo octocat/Hello-World`), blank lines and
 * `#` comments ignored. The lines are bounded while they are read (length, count, bytes),
 * judged one by one, and the valid ones written set-based: one INSERT … SELECT FROM unnest
 * for every new source, whatever the file's size.
 */

/** Longer than any valid line (`repo:` + 39 + `/` + 100 = 145), short enough to echo. */
export const MAX_LINE_CHARS = 512;
export const MAX_LINES = 100_000;
/** What an operator's paste or a bad pipe may make us buffer before it is refused. */
export const MAX_BYTES = MAX_LINES * 256;
/** How much of a bad line is echoed back. */
export const ECHO_CHARS = 80;

/**
 * `--disable-missing` with a file that has invalid lines: the file is meant
 * to be the whole list, so a line it failed to name would disable that source. Nothing is
 * changed unless the operator says --force.
 */
export class ImportRefused extends AppError {
  constructor(message: string, context: Record<string, unknown>) {
    super('IMPORT_REFUSED', message, context);
  }
}

/** The input is refused as a whole (too many lines or bytes): nothing was written. */
export class ImportTooLarge extends AppError {
  constructor(message: string, context: Record<string, unknown>) {
    super('IMPORT_TOO_LARGE', message, context);
  }
}

export interface InvalidLine {
  line: number;
  /** The line's first ECHO_CHARS characters, control characters escaped. */
  text: string;
  reason: string;
}

export interface ParsedLines {
  specs: { line: number; spec: SourceSpec }[];
  invalid: InvalidLine[];
  /** A line naming a source an earlier line already named (ignoring case). */
  duplicates: { line: number; firstLine: number }[];
  lines: number;
}

/**
 * What an echo shows of a hostile line: bounded, no terminal escapes, no newlines, no
 * bidirectional overrides or invisible characters (escapeUnsafe).
 */
export function echo(text: string, max = ECHO_CHARS): string {
  const chars = [...text];
  const cut = chars.length > max ? `${chars.slice(0, max).join('')}…` : text;
  return escapeUnsafe(cut);
}

/** sourceSpec's message quotes the bad value whole: quote no more than 40 characters of it. */
function reasonOf(err: InvalidSource): string {
  return echo(err.message.replace(/"([^"]{40})[^"]+"/g, '"$1…"'), ECHO_CHARS * 3);
}

function keyOf(spec: SourceSpec): string {
  return spec.kind === 'public' ? 'public' : `${spec.kind}:${spec.target.toLowerCase()}`;
}

/**
 * The kind is the line's first word; the target follows a colon (SOURCES: `repo:o/n`) or
 * white space (bin/sources add: `repo o/n`). A bare `owner/name` is no kind: it stays
 * invalid, with a reason that shows both ways to write it.
 */
function parseLine(raw: string): SourceSpec | null {
  const hash = raw.indexOf('#');
  const entry = (hash === -1 ? raw : raw.slice(0, hash)).trim();
  if (entry === '') return null;
  const m = /^([^\s:]*)\s*(?::|\s|$)(.*)$/s.exec(entry)!;
  const word = m[1]!;
  const target = m[2]!.trim() === '' ? undefined : m[2]!;
  if (target === undefined && /^[^/]+\/[^/]+$/.test(word)) {
    const chars = [...word];
    const name = chars.length > 40 ? `${chars.slice(0, 40).join('')}…` : word;
    throw new InvalidSource(`no kind: a repository is written repo:${name} or repo ${name}`);
  }
  return sourceSpec(word.toLowerCase(), target);
}

/**
 * Whether this file may be the whole list (--disable-missing): not when a line could not be
 * read (it would disable the source it meant to name) unless `force`, and never when it
 * names nothing (that would disable every source).
 */
export function checkWholeList(parsed: ParsedLines, force: boolean): void {
  if (parsed.specs.length === 0) {
    throw new ImportRefused(
      '--disable-missing with no valid source in the file would disable every source; refusing, nothing was changed',
      { invalid: parsed.invalid.length },
    );
  }
  if (parsed.invalid.length > 0 && !force) {
    const first = parsed.invalid[0]!;
    throw new ImportRefused(
      `--disable-missing refused: ${parsed.invalid.length} invalid line(s) (first: line ${first.line}); nothing was changed. Fix them, or add --force to disable every source the valid lines do not name`,
      { invalid: parsed.invalid.length, first_line: first.line },
    );
  }
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Reads lines from a byte stream, bounded while reading: a line longer than MAX_LINE_CHARS
 * is invalid and skipped without being kept, more than MAX_LINES lines or MAX_BYTES bytes
 * refuse the whole input. Bytes that are not UTF-8 make their line invalid.
 */
export async function parseSourceLines(input: AsyncIterable<Uint8Array>): Promise<ParsedLines> {
  const out: ParsedLines = { specs: [], invalid: [], duplicates: [], lines: 0 };
  const seen = new Map<string, number>();
  let bytes = 0;
  let pending: Uint8Array[] = [];
  let pendingLength = 0;
  let tooLong = false;

  const finishLine = () => {
    out.lines++;
    const n = out.lines;
    if (n > MAX_LINES) {
      throw new ImportTooLarge(`more than ${MAX_LINES} lines: split the file`, { lines: n });
    }
    const bytesOfLine = Buffer.concat(pending, pendingLength);
    pending = [];
    pendingLength = 0;
    if (tooLong) {
      tooLong = false;
      const head = Buffer.from(bytesOfLine.subarray(0, ECHO_CHARS * 4)).toString('utf8');
      out.invalid.push({
        line: n,
        text: echo(head),
        reason: `longer than ${MAX_LINE_CHARS} characters`,
      });
      return;
    }
    let text: string;
    try {
      text = utf8.decode(bytesOfLine);
    } catch {
      out.invalid.push({
        line: n,
        text: echo(bytesOfLine.toString('utf8')),
        reason: 'not UTF-8',
      });
      return;
    }
    if (n === 1 && text.startsWith('\uFEFF')) text = text.slice(1);
    if (text.endsWith('\r')) text = text.slice(0, -1);
    try {
      const spec = parseLine(text);
      if (!spec) return;
      const key = keyOf(spec);
      const first = seen.get(key);
      if (first !== undefined) out.duplicates.push({ line: n, firstLine: first });
      else {
        seen.set(key, n);
        out.specs.push({ line: n, spec });
      }
    } catch (err) {
      if (!(err instanceof InvalidSource)) throw err;
      out.invalid.push({ line: n, text: echo(text.trim()), reason: reasonOf(err) });
    }
  };

  const append = (chunk: Uint8Array) => {
    if (tooLong || chunk.length === 0) return;
    // Characters are at most 4 bytes: past 4 × the limit in bytes it is too long for sure.
    if (pendingLength + chunk.length > MAX_LINE_CHARS * 4) {
      const room = Math.max(0, MAX_LINE_CHARS * 4 - pendingLength);
      pending.push(chunk.subarray(0, room));
      pendingLength += room;
      tooLong = true;
      return;
    }
    pending.push(chunk);
    pendingLength += chunk.length;
  };

  for await (const chunk of input) {
    bytes += chunk.length;
    if (bytes > MAX_BYTES) {
      throw new ImportTooLarge(`more than ${MAX_BYTES} bytes: split the file`, { bytes });
    }
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(0x0a, start);
      if (nl === -1) break;
      append(chunk.subarray(start, nl));
      checkChars();
      finishLine();
      start = nl + 1;
    }
    append(chunk.subarray(start));
  }
  if (pendingLength > 0 || tooLong) {
    checkChars();
    finishLine();
  }
  return out;

  /** A line within 4 × the limit in bytes may still be too long in characters. */
  function checkChars() {
    if (tooLong || pendingLength <= MAX_LINE_CHARS) return;
    const s = Buffer.concat(pending, pendingLength).toString('utf8');
    if ([...s].length > MAX_LINE_CHARS) tooLong = true;
  }
}

export interface SourceRef {
  id: number;
  kind: SourceKind;
  target: string | null;
}

export interface ImportResult {
  /** Added by this import (id null in a dry run: nothing was written). */
  added: (Omit<SourceRef, 'id'> & { id: number | null; line: number })[];
  /** Named by the file and already there (case-insensitively), enabled or not. */
  existing: (SourceRef & { line: number; enabled: boolean })[];
  /** Re-enabled because the file names them (only with disableMissing). */
  enabled: SourceRef[];
  /** Enabled sources the file does not name, disabled (only with disableMissing). */
  disabled: SourceRef[];
}

interface Row {
  id: string;
  kind: SourceKind;
  target: string | null;
  enabled: boolean;
  idx: number;
}

/**
 * Writes the valid lines in one transaction, set-based: the existing ones are found with one
 * join on the unique index's key (kind, lower(target), mode), the new ones inserted
 * by one statement (ON CONFLICT DO NOTHING: a concurrent add wins quietly and is reported
 * as existing on the next run). With disableMissing the file is the whole list: every
 * enabled source of this mode it does not name is disabled, and the disabled ones it names
 * are enabled again (due now, failures cleared, as `bin/sources enable` does). dryRun reads
 * the same answers and writes nothing.
 */
export async function importSources(
  db: Db,
  specs: readonly { line: number; spec: SourceSpec }[],
  mode: GithubMode,
  opts: { disableMissing: boolean; dryRun: boolean },
): Promise<ImportResult> {
  const kinds = specs.map((s) => s.spec.kind);
  const targets = specs.map((s) => (s.spec.kind === 'public' ? null : s.spec.target));
  return db.transaction().execute(async (trx) => {
    const input = sql`
      SELECT k.kind, k.target, k.idx::int AS idx
      FROM unnest(${kinds}::text[], ${targets}::text[]) WITH ORDINALITY AS k(kind, target, idx)`;
    const found = await sql<Row>`
      SELECT s.id, s.kind, s.target, s.enabled, i.idx
      FROM (${input}) i
      JOIN event_sources s ON s.kind = i.kind AND s.mode = ${mode}
        -- An equality (not IS NOT DISTINCT FROM) so 10,000 lines are one hash join.
        AND coalesce(lower(s.target), '') = coalesce(lower(i.target), '')`.execute(trx);
    const existingIdx = new Set(found.rows.map((r) => r.idx));
    const result: ImportResult = { added: [], existing: [], enabled: [], disabled: [] };
    for (const r of found.rows) {
      result.existing.push({ ...ref(r), line: specs[r.idx - 1]!.line, enabled: r.enabled });
    }
    const fresh = specs.map((_, i) => i + 1).filter((idx) => !existingIdx.has(idx));
    if (!opts.dryRun && fresh.length > 0) {
      const inserted = await sql<Row>`
        WITH i AS (${input})
        INSERT INTO event_sources (kind, target, mode, commits_enabled, next_poll_at)
        -- Commit fetching is on for every kind (commitsEnabledFor);
        -- due at once, to the millisecond (as addSource).
        SELECT i.kind, i.target, ${mode}, true, date_trunc('milliseconds', now()) FROM i WHERE i.idx = ANY(${fresh}::int[]) ORDER BY i.idx
        ON CONFLICT DO NOTHING
        RETURNING id, kind, target, enabled`.execute(trx);
      // RETURNING has no idx: match the rows back by their key.
      const byKey = new Map(fresh.map((idx) => [keyOf(specs[idx - 1]!.spec), idx]));
      for (const r of inserted.rows) {
        const idx = byKey.get(r.target === null ? 'public' : `${r.kind}:${r.target.toLowerCase()}`);
        result.added.push({ ...ref(r), line: idx ? specs[idx - 1]!.line : 0 });
      }
    } else {
      for (const idx of fresh) {
        const s = specs[idx - 1]!;
        result.added.push({ id: null, kind: s.spec.kind, target: targets[idx - 1]!, line: s.line });
      }
    }
    result.added.sort((a, b) => a.line - b.line);
    result.existing.sort((a, b) => a.line - b.line);
    if (opts.disableMissing) {
      const named = found.rows.map((r) => r.id);
      const toEnable = found.rows.filter((r) => !r.enabled).map((r) => r.id);
      const keep = [
        ...named,
        ...result.added.flatMap((a) => (a.id === null ? [] : [String(a.id)])),
      ];
      const missing = opts.dryRun
        ? await sql<Row>`
            SELECT id, kind, target, enabled, 0 AS idx FROM event_sources
            WHERE mode = ${mode} AND enabled AND NOT (id = ANY(${keep}::bigint[]))
            ORDER BY id`.execute(trx)
        : await sql<Row>`
            UPDATE event_sources SET enabled = false, updated_at = now()
            WHERE mode = ${mode} AND enabled AND NOT (id = ANY(${keep}::bigint[]))
            RETURNING id, kind, target, enabled, 0 AS idx`.execute(trx);
      result.disabled = missing.rows.map(ref).sort((a, b) => a.id - b.id);
      if (!opts.dryRun && toEnable.length > 0) {
        await sql`
          UPDATE event_sources
          SET enabled = true, consecutive_failures = 0, next_poll_at = now(), updated_at = now()
          WHERE id = ANY(${toEnable}::bigint[])`.execute(trx);
      }
      result.enabled = found.rows
        .filter((r) => !r.enabled)
        .map(ref)
        .sort((a, b) => a.id - b.id);
    }
    return result;
  });
}

function ref(r: Pick<Row, 'id' | 'kind' | 'target'>): SourceRef {
  return { id: Number(r.id), kind: r.kind, target: r.target };
}
