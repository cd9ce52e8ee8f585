import { type ParseArgsConfig, parseArgs } from 'node:util';
import { UsageError } from '../platform/errors.ts';
import { bounded, quoted } from '../platform/quote.ts';

type Options = NonNullable<ParseArgsConfig['options']>;

/**
 * `--limit -1` → `--limit=-1`: parseArgs takes a value starting with "-" for a flag and
 * calls the option "ambiguous"; a number-like value of an option that takes one is that
 * option's value, so the check of the value itself can say what is wrong with it.
 */
function joinNegativeValues(argv: string[], options: Options): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const next = argv[i + 1];
    const name = arg.startsWith('--') ? arg.slice(2) : null;
    if (name && options[name]?.type === 'string' && next !== undefined && /^-[\d.]/.test(next)) {
      out.push(`${arg}=${next}`);
      i++;
    } else {
      out.push(arg);
    }
  }
  return out;
}

/**
 * parseArgs with the project's conventions: unknown flags are a UsageError (exit 2),
 * `--help`/`-h` is always accepted. Returns null when help was printed.
 */
export function parseCli<O extends Options>(
  argv: string[],
  usage: string,
  options: O,
  { allowPositionals = false }: { allowPositionals?: boolean } = {},
) {
  let parsed: ReturnType<
    typeof parseArgs<{
      options: O & { help: { type: 'boolean'; short: 'h' } };
      allowPositionals: boolean;
      args: string[];
      strict: true;
    }>
  >;
  try {
    parsed = parseArgs({
      args: joinNegativeValues(argv, options),
      options: { ...options, help: { type: 'boolean', short: 'h' } } as O & {
        help: { type: 'boolean'; short: 'h' };
      },
      allowPositionals,
      strict: true,
    });
  } catch (err) {
    // parseArgs quotes the offending argument whole: a 100,000-character flag is cut.
    throw new UsageError(`${bounded((err as Error).message)}\n\n${usage}`);
  }
  if ((parsed.values as { help?: boolean }).help) {
    process.stdout.write(`${usage.trim()}\n`);
    return null;
  }
  return parsed;
}

/** A positive integer flag value, or a UsageError naming the flag. */
export function positiveIntFlag(
  name: string,
  raw: string | undefined,
  usage: string,
): number | undefined {
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < 1) {
    throw new UsageError(`--${name} must be a positive integer (got ${quoted(raw)})\n\n${usage}`);
  }
  return n;
}
