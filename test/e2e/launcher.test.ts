import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
// @ts-expect-error: plain JavaScript (it must parse on old Nodes), no type declarations
import { nodeProblem } from '../../bin/lib/node-check.mjs';
import { type Child, killAll, spawnBin } from '../recovery/world.ts';
import { ROOT } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';

/**
 * bin/lib/entry.mjs and scripts/use-node.sh (items 7 and 8): one answer to "can
 * this Node run the project", and the memory defaults every process started by the
 * README's commands gets without any environment.
 */

type Check = (p: unknown) => { reason: string; fix: string } | null;
const check = nodeProblem as Check;

function fakeProcess(version: string, typescript: string | false, NODE_OPTIONS?: string) {
  return {
    version: `v${version}`,
    versions: { node: version },
    features: { typescript },
    env: { NODE_OPTIONS },
  };
}

describe('node check', () => {
  it.each([
    ['20.19.0', false, /does not run TypeScript by default/],
    ['22.12.0', false, /does not run TypeScript by default/], // stripping exists, off by default
    ['22.17.1', false, /does not run TypeScript by default/],
    ['23.5.0', false, /does not run TypeScript by default/],
    ['24.1.0', false, /has type stripping turned off/],
  ] as const)('Node %s without type stripping: refused (%s)', (version, ts, says) => {
    const problem = check(fakeProcess(version, ts, '--no-experimental-strip-types'));
    expect(problem?.reason).toMatch(says);
  });

  it.each([
    ['22.12.0', 'strip'], // turned on by hand (NODE_OPTIONS=--experimental-strip-types): it runs
    ['22.18.0', 'strip'],
    ['23.6.0', 'strip'],
    ['24.11.0', 'strip'],
  ] as const)('Node %s with type stripping (%s): accepted', (version, ts) => {
    expect(check(fakeProcess(version, ts))).toBeNull();
  });

  describe('use-node.sh and bin/* agree, and the advice never loops', () => {
    let dir: string;
    // The real Node 24 used to run the tests, and a `node` on PATH that is the same Node
    // with type stripping turned off (as a Node 22.12–22.17 is by default).
    const cache = path.dirname(path.dirname(process.execPath));
    beforeAll(async () => {
      dir = await mkdtemp(path.join(os.tmpdir(), 'gpi-node-check-'));
      await writeFile(
        path.join(dir, 'node'),
        `#!/bin/sh\nexec "${process.execPath}" --no-experimental-strip-types "$@"\n`,
      );
      await chmod(path.join(dir, 'node'), 0o755);
    });
    afterAll(async () => {
      await rm(dir, { recursive: true, force: true });
    });

    function sh(script: string, env: Record<string, string> = {}) {
      return new Promise<{ code: number; out: string; err: string }>((resolve) => {
        execFile(
          'bash',
          ['-c', script],
          {
            cwd: ROOT,
            env: { HOME: os.homedir(), PATH: `${dir}:/usr/bin:/bin`, NODE24_CACHE: cache, ...env },
          },
          (error, out, err) => resolve({ code: error ? Number(error.code ?? 1) : 0, out, err }),
        );
      });
    }

    it('a node that fails the check fails bin/* too, and use-node.sh replaces it with one that passes both', async () => {
      const direct = await sh('bin/db --help');
      expect(direct.code).toBe(2);
      expect(direct.err).toMatch(/has type stripping turned off/);
      const viaScript = await sh('node bin/lib/node-check.mjs');
      expect(viaScript.code).toBe(1);

      const fixed = await sh(
        '. scripts/use-node.sh && command -v node && bin/db --help >/dev/null && echo OK',
      );
      expect(fixed.code, fixed.err).toBe(0);
      expect(fixed.out).toBe(`${cache}/bin/node\nOK\n`);
      expect(fixed.err).toMatch(new RegExp(`use-node: ${cache}/bin/node v24\\.`));
    });

    it('when no Node can pass (type stripping turned off in NODE_OPTIONS), use-node.sh says why and fails', async () => {
      const env = { NODE_OPTIONS: '--no-experimental-strip-types' };
      const r = await sh('. scripts/use-node.sh; echo "status $?"', env);
      expect(r.out).toBe('status 1\n');
      expect(r.err).toMatch(/cannot run the project either/);
      expect(r.err).toMatch(/Remove --no-experimental-strip-types/);
      // bin/* gives the same reason, and does not send the user back to use-node.sh.
      const bin = await sh(`PATH="${cache}/bin:$PATH" bin/db --help`, env);
      expect(bin.code).toBe(2);
      expect(bin.err).toMatch(/has type stripping turned off/);
      expect(bin.err).not.toMatch(/use-node/);
    });
  });
});

describe('memory defaults', () => {
  const t = useTestDatabase();
  const children: Child[] = [];
  afterAll(() => killAll(children));

  async function webProcess(env: Record<string, string> = {}) {
    // The launcher applies the defaults itself here (the harness sets them beforehand elsewhere).
    const web = spawnBin(
      'web',
      { DATABASE_URL: t.url, HTTP_PORT: '0', GITHUB_MODE: 'fixture', ...env },
      [],
      { launcherApplies: true },
    );
    children.push(web);
    await web.waitForLine((l) => l.event === 'web.listening', 'web.listening');
    const pid = web.process.pid!;
    const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    const environ = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    // The same process that was spawned (execve, not a child): signals and exit codes
    // reach it directly.
    expect(web.lines[0]?.pid).toBe(pid);
    return { web, args, environ };
  }

  it('bin/* run with MALLOC_ARENA_MAX=2, a 4 MB semi-space and a 192 MB old space when nothing is set', async () => {
    const { args, environ } = await webProcess();
    expect(args).toContain('--max-semi-space-size=4');
    expect(args).toContain('--max-old-space-size=192');
    expect(environ).toContain('MALLOC_ARENA_MAX=2');
  });

  it("an operator's own settings win", async () => {
    const { args, environ } = await webProcess({
      NODE_OPTIONS: '--max-old-space-size=300',
      MALLOC_ARENA_MAX: '4',
    });
    expect(args).toContain('--max-semi-space-size=4');
    expect(args.some((a) => a.startsWith('--max-old-space-size'))).toBe(false);
    expect(environ).toContain('MALLOC_ARENA_MAX=4');
    expect(environ).toContain('NODE_OPTIONS=--max-old-space-size=300');
  });
});
