import { DatabaseNotSetUp } from '../platform/db/setup-state.ts';
import { ConfigError, UsageError } from '../platform/errors.ts';
import { describeFailure } from './failure.ts';

export type Main = (argv: string[]) => Promise<number>;

/**
 * Runs a command's main and turns its outcome into an exit code:
 * 0 ok; 2 bad configuration or usage (one clear line on stderr); 1 anything else.
 * Commands print their own output; uncaught errors print one line (name, code and first
 * line of the message; a lost database connection is named as such), never a stack.
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
      process.stderr.write(`${name}: ${describeFailure(err)}\n`);
      code = 1;
    }
  }
  // Let stdout/stderr drain before exiting.
  await new Promise((r) => process.stdout.write('', () => r(undefined)));
  process.exit(code);
}
