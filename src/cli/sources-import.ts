import { createReadStream } from 'node:fs';
import { createApp } from '../app.ts';
import { UsageError } from '../platform/errors.ts';
import {
  checkWholeList,
  ECHO_CHARS,
  echo,
  ImportRefused,
  type ImportResult,
  ImportTooLarge,
  importSources,
  MAX_LINE_CHARS,
  MAX_LINES,
  type ParsedLines,
  parseSourceLines,
} from '../store/sources-import.ts';
import { parseCli } from './args.ts';

export const IMPORT_USAGE = `
Usage: bin/sources import FILE|- [--disable-missing [--force]] [--dry-run] [--json]

Adds every source FILE lists (- reads standard input), one a line, in the SOURCES form or
as bin/sources add takes it:
  repo:octocat/Hello-World      repo octocat/Hello-World
  org:github                    org github
  user:torvalds                 user torvalds
  public
Blank lines and # comments are ignored; a source named twice (ignoring case) counts once.
A bare OWNER/NAME is invalid (it names no kind).
Idempotent: a source already there is left as it is. Sources are added in this process's
GITHUB_MODE. Prints how many were added, already there and invalid, with line numbers.

  --disable-missing   the file is the whole list: disable every enabled source it does not
                      name, and enable again the disabled ones it names. Refused (exit 2,
                      nothing changed) when any line is invalid: that line's source would
                      be disabled
  --force             with --disable-missing: go ahead despite invalid lines
  --dry-run           say what would change; write nothing
  --json              the summary as one JSON document

Lines are at most ${MAX_LINE_CHARS} characters (a longer one is invalid), a file at most
${MAX_LINES} lines (a longer one is refused whole, nothing written).
Exit codes: 0 every line was valid; 1 some lines were invalid — the valid ones are still
added — or the file could not be read; 2 bad arguments, a file refused as too large, or
--disable-missing refused.
`;

/** How many of a list a terminal summary shows; --json carries up to JSON_LIST_MAX. */
const SHOWN = 20;
const JSON_LIST_MAX = 1000;

function line(s: string): void {
  process.stdout.write(`${s}\n`);
}

function label(s: { kind: string; target: string | null }): string {
  return s.target === null ? s.kind : `${s.kind}:${s.target}`;
}

async function readInput(file: string): Promise<ParsedLines> {
  const stream = file === '-' ? process.stdin : createReadStream(file);
  try {
    return await parseSourceLines(stream);
  } finally {
    if (file !== '-') stream.destroy();
  }
}

function capped<T>(items: T[]): { items: T[]; truncated: boolean } {
  return { items: items.slice(0, JSON_LIST_MAX), truncated: items.length > JSON_LIST_MAX };
}

function toJson(file: string, parsed: ParsedLines, r: ImportResult, dryRun: boolean) {
  const list = <T>(name: string, items: T[]) => {
    const c = capped(items);
    return { [name]: c.items, [`${name}_count`]: items.length, [`${name}_truncated`]: c.truncated };
  };
  return {
    file,
    dry_run: dryRun,
    lines: parsed.lines,
    ...list('added', r.added),
    ...list('existing', r.existing),
    ...list('invalid', parsed.invalid),
    ...list(
      'duplicates',
      parsed.duplicates.map((d) => ({ line: d.line, first_line: d.firstLine })),
    ),
    ...list('enabled', r.enabled),
    ...list('disabled', r.disabled),
  };
}

function more(n: number): void {
  if (n > SHOWN) line(`  … and ${n - SHOWN} more (--json lists them)`);
}

function printInvalid(parsed: ParsedLines): void {
  if (parsed.invalid.length === 0) return;
  line(`invalid lines: ${parsed.invalid.length}`);
  for (const i of parsed.invalid.slice(0, SHOWN))
    line(`  line ${i.line}: "${i.text}": ${i.reason}`);
  more(parsed.invalid.length);
}

/** What a refused --disable-missing prints with --json: the lines, and nothing changed. */
function refusedJson(file: string, parsed: ParsedLines) {
  const c = capped(parsed.invalid);
  return {
    file,
    lines: parsed.lines,
    valid_count: parsed.specs.length,
    invalid: c.items,
    invalid_count: parsed.invalid.length,
    invalid_truncated: c.truncated,
  };
}

function printSummary(file: string, parsed: ParsedLines, r: ImportResult, dryRun: boolean) {
  const would = dryRun ? 'would be ' : '';
  const where = file === '-' ? 'standard input' : file;
  const existingDisabled = r.existing.filter((e) => !e.enabled).length;
  line(
    `${dryRun ? 'dry run of ' : ''}${where}: ${r.added.length} ${would}added, ${r.existing.length} already there${existingDisabled && r.enabled.length === 0 ? ` (${existingDisabled} disabled)` : ''}, ${parsed.invalid.length} invalid${parsed.duplicates.length ? `, ${parsed.duplicates.length} duplicate lines` : ''}`,
  );
  printInvalid(parsed);
  if (parsed.duplicates.length) {
    line('duplicate lines (counted once):');
    for (const d of parsed.duplicates.slice(0, SHOWN))
      line(`  line ${d.line}: same source as line ${d.firstLine}`);
    more(parsed.duplicates.length);
  }
  if (r.enabled.length) {
    line(`${would || ''}enabled again (named by the file): ${r.enabled.length}`);
    for (const s of r.enabled.slice(0, SHOWN)) line(`  source ${s.id}: ${label(s)}`);
    more(r.enabled.length);
  }
  if (r.disabled.length) {
    line(`${would}disabled (not in the file): ${r.disabled.length}`);
    for (const s of r.disabled.slice(0, SHOWN)) line(`  source ${s.id}: ${label(s)}`);
    more(r.disabled.length);
  }
}

export async function main(argv: string[]): Promise<number> {
  const cli = parseCli(
    argv,
    IMPORT_USAGE,
    {
      json: { type: 'boolean' },
      'disable-missing': { type: 'boolean' },
      'dry-run': { type: 'boolean' },
      force: { type: 'boolean' },
    },
    { allowPositionals: true },
  );
  if (!cli) return 0;
  const [file, ...extra] = cli.positionals;
  if (file === undefined)
    throw new UsageError(`import needs a FILE (or - for stdin)\n${IMPORT_USAGE}`);
  if (extra.length > 0) {
    throw new UsageError(`unexpected argument "${echo(extra[0]!)}"\n${IMPORT_USAGE}`);
  }
  const json = cli.values.json ?? false;
  const dryRun = cli.values['dry-run'] ?? false;
  const disableMissing = cli.values['disable-missing'] ?? false;
  const force = cli.values.force ?? false;
  if (force && !disableMissing) throw new UsageError('--force applies to --disable-missing only');

  let parsed: ParsedLines;
  try {
    parsed = await readInput(file);
  } catch (err) {
    if (err instanceof ImportTooLarge) {
      throw new UsageError(
        `${file === '-' ? 'standard input' : echo(file)}: ${err.message}; nothing was imported`,
      );
    }
    const e = err as NodeJS.ErrnoException;
    if (typeof e.code === 'string' && e.syscall) {
      process.stderr.write(
        `sources: cannot read ${echo(file)}: ${e.code} (${e.message.slice(0, ECHO_CHARS * 2)})\n`,
      );
      return 1;
    }
    throw err;
  }
  if (disableMissing) {
    try {
      checkWholeList(parsed, force);
    } catch (err) {
      if (!(err instanceof ImportRefused)) throw err;
      // Which lines, so the operator can fix them; then why nothing happened.
      if (json) line(JSON.stringify({ ...refusedJson(file, parsed), refused: err.message }));
      else printInvalid(parsed);
      process.stderr.write(`sources: ${err.message}\n`);
      return 2;
    }
  }

  const app = await createApp({ role: 'sources', poolMax: 2 });
  try {
    const result = await importSources(app.db, parsed.specs, app.config.github.mode, {
      disableMissing,
      dryRun,
    });
    if (json) line(JSON.stringify(toJson(file, parsed, result, dryRun)));
    else printSummary(file, parsed, result, dryRun);
    return parsed.invalid.length > 0 ? 1 : 0;
  } finally {
    await app.close();
  }
}
