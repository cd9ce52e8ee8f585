import { type ParseArgsConfig, parseArgs } from 'node:util';
import { UsageError } from '../errors.ts';

type Options = NonNullable<ParseArgsConfig['options']>;

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
      args: argv,
      options: { ...options, help: { type: 'boolean', short: 'h' } } as O & {
        help: { type: 'boolean'; short: 'h' };
      },
      allowPositionals,
      strict: true,
    });
  } catch (err) {
    throw new UsageError(`${(err as Error).message}\n\n${usage}`);
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
    throw new UsageError(`--${name} must be a positive integer (got "${raw}")\n\n${usage}`);
  }
  return n;
}
