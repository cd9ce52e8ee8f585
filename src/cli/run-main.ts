import { DatabaseNotSetUp } from '../db/setup-state.ts';
import { ConfigError, UsageError } from '../errors.ts';

export type Main = (argv: string[]) => Promise<number>;

/**
 * Runs a command's main and turns its outcome into an exit code:
 * 0 ok; 2 bad configuration or usage (one clear line on stderr); 1 anything else.
 * Commands print their own output; uncaught errors print name, code and message only
 * (the structured details are in the JSON log).
 */
export async function runMain(name: string, main: Main, argv: string[]): Promise<never> {
  let code: number;
  try {
    code = await main(argv);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${name}: configuration error: ${err.message}\n`);
      code = 2;
    } else if (err instanceof UsageError) {
      process.stderr.write(`${name}: ${err.message}\nRun "bin/${name} --help" for usage.\n`);
      code = 2;
    } else if (err instanceof DatabaseNotSetUp) {
      process.stderr.write(`${name}: ${err.message}\n`);
      code = 1;
    } else {
      const e = err as Error & { code?: string };
      process.stderr.write(
        `${name}: ${e?.name ?? 'Error'}${e?.code ? ` [${e.code}]` : ''}: ${e?.message ?? String(err)}\n`,
      );
      code = 1;
    }
  }
  // Let stdout/stderr drain before exiting.
  await new Promise((r) => process.stdout.write('', () => r(undefined)));
  process.exit(code);
}
