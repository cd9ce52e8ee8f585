// Shared launcher for bin/*: checks that this Node can run the project (node-check.mjs),
// applies the memory defaults (re-executing itself once if it must), then runs
// src/cli/<name>.ts's main(argv) → exit code.
import { nodeProblem } from './node-check.mjs';

// docs/performance.md "Soak": with Node's defaults a worker reaches ~340 MB RSS for 30-80 MB
// of live objects; with these, under 150 MB at the same throughput. MALLOC_ARENA_MAX=2:
// glibc keeps 2 malloc arenas instead of one per thread. A 4 MB semi-space: cheap, frequent
// minor GCs. A 192 MB old-space limit: V8 sizes its heap against the limit (which otherwise
// follows the machine's memory), and it leaves room for a 25 MB webhook body (~45 MB of heap
// per delivery in flight). Each applies only when not already set (NODE_OPTIONS, the
// command line, the environment): an operator's own value always wins.
export const V8_DEFAULTS = [
  ['--max-semi-space-size', '4'],
  ['--max-old-space-size', '192'],
];
export const MALLOC_ENV = {
  MALLOC_ARENA_MAX: '2',
  // A fixed threshold turns off glibc's sliding one: after the first 24 MB webhook body is
  // freed it would serve every later one from an arena that is never given back to the OS.
  MALLOC_MMAP_THRESHOLD_: '131072',
};

function memoryDefaults() {
  const given = `${process.execArgv.join(' ')} ${process.env.NODE_OPTIONS ?? ''}`.replaceAll(
    '_',
    '-',
  );
  const flags = V8_DEFAULTS.filter(([flag]) => !given.includes(flag)).map(([f, v]) => `${f}=${v}`);
  const env = Object.fromEntries(
    Object.entries(MALLOC_ENV).filter(([name]) => process.env[name] === undefined),
  );
  return { flags, env };
}

/**
 * V8's heap limits and glibc's arenas are fixed when the process starts, so applying them
 * means starting again: execve replaces this process (same pid, same stdio, signals and
 * exit code go straight to the new image), before anything else has run. The new process
 * has every default set and so never re-executes. Without process.execve (Node < 22.15,
 * Windows) the defaults are skipped: set them in the environment instead.
 */
function applyMemoryDefaults() {
  const { flags, env } = memoryDefaults();
  if ((flags.length === 0 && Object.keys(env).length === 0) || typeof process.execve !== 'function')
    return;
  process.execve(
    process.execPath,
    [process.execPath, ...flags, ...process.execArgv, process.argv[1], ...process.argv.slice(2)],
    { ...process.env, ...env },
  );
}

export async function launch(name) {
  const problem = nodeProblem();
  if (problem) {
    process.stderr.write(`github-push-ingestor: ${problem.reason}.\n${problem.fix}\n`);
    process.exit(2);
  }
  applyMemoryDefaults();
  const { runMain } = await import('../../src/cli/run-main.ts');
  const mod = await import(`../../src/cli/${name}.ts`);
  await runMain(name, mod.main, process.argv.slice(2));
}
