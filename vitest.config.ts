import { availableParallelism, tmpdir } from 'node:os';
import path from 'node:path';
import { defineConfig } from 'vitest/config';

// Node's module compile cache (type-stripped source and V8 code, keyed by each file's
// contents, so never stale) for the test forks and every bin/* they start: a child's start
// costs about a third less CPU once the cache is warm, and the suite starts hundreds of them.
// It lives under the system's temporary directory, never in the checkout; NODE_COMPILE_CACHE
// or NODE_DISABLE_COMPILE_CACHE=1 in the environment wins. Set here, in the main process, so
// that the forks inherit it from their start; test/recovery/world.ts passes it on to the
// children it starts with a clean environment.
if (!process.env.NODE_DISABLE_COMPILE_CACHE) {
  process.env.NODE_COMPILE_CACHE ??= path.join(tmpdir(), 'node-compile-cache');
}

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    setupFiles: ['test/support/network-guard.ts'],
    // Files run in parallel forks; each gets its own database cloned from the template.
    // Two a core: the suite mostly waits (on child processes, leases, Postgres), and at two
    // forks on this 2-core machine its CPU was 65-85% idle; four forks took the suite from
    // 530 s to 339 s. The tests hold at this load and beside busy loops (no timed claims),
    // and more forks per core would only queue the child processes' starts.
    pool: 'forks',
    maxWorkers: Math.max(2, Math.min(8, availableParallelism() * 2)),
    // Hang guards, not claims: at load average 15 on 2 cores one bin/* start takes 5-10 s,
    // and a test of four sequential commands passed 30 s (issue 25 item 4). A test's own
    // assertions say what must happen; these only stop a test that never ends.
    testTimeout: 120_000,
    hookTimeout: 180_000,
    teardownTimeout: 30_000,
    reporters: ['default'],
  },
});
