import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createGitHubClient } from '../../src/budget/client.ts';
import { sourceSpec } from '../../src/platform/config/source-spec.ts';
import type { Logger } from '../../src/platform/log.ts';
import { addSource } from '../../src/store/sources.ts';
import type { Deps } from '../../src/work/deps.ts';
import { memoryDefaultsEnv } from '../support/cli.ts';
import type { TestDatabase } from '../support/db.ts';
import type { FakeGitHub } from '../support/fake-github.ts';
import { pushEvent, repoProfile, userProfile } from '../support/github-factories.ts';
import { type LogLine, testConfig, waitFor } from './helpers.ts';

/** A small GitHub world, in-process deps, and child processes (not a test file). */

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface World {
  eventIds: string[];
  actorIds: number[];
  repositoryIds: number[];
}

/**
 * `n` pushes, each by its own actor to its own repository, on the public feed, with a
 * profile for every actor and repository. Ids start at `first` so files do not collide.
 */
export function seedPushes(fake: FakeGitHub, n: number, first = 1): World {
  const world: World = { eventIds: [], actorIds: [], repositoryIds: [] };
  const events = [];
  for (let i = 0; i < n; i++) {
    const actor = { id: 70_000 + first + i, login: `pusher-${first + i}` };
    const repo = { id: 80_000 + first + i, name: `org-${first + i}/repo-${first + i}` };
    const ev = pushEvent({ id: 50_000_000_000 + first + i, actor, repo });
    events.push(ev);
    world.eventIds.push(ev.id);
    world.actorIds.push(actor.id);
    world.repositoryIds.push(repo.id);
    fake.setUser(userProfile(actor));
    fake.setRepo(repoProfile({ id: repo.id, full_name: repo.name }));
  }
  fake.addEvents('public', events);
  return world;
}

/** The public source, due now, in live mode (the fake stands in for api.github.com). */
export async function addPublicSource(t: TestDatabase): Promise<number> {
  const { source } = await addSource(t.db, sourceSpec('public'), 'live');
  return Number(source.id);
}

export interface TestDeps extends Deps {
  close(): Promise<void>;
}

/** Deps as the worker builds them, on the test database and the fake GitHub. */
export function liveDeps(
  t: TestDatabase,
  fake: FakeGitHub,
  logger: Logger,
  env: Record<string, string> = {},
): TestDeps {
  const config = testConfig({ GITHUB_MODE: 'live', GITHUB_API_URL: fake.url, ...env });
  const github = createGitHubClient({ config, db: t.db, databaseUrl: t.url, logger });
  return {
    config,
    db: t.db,
    pool: t.pool,
    github,
    logger,
    workerId: 'test-worker:1',
    close: () => github.close(),
  };
}

export interface Child {
  process: ChildProcess;
  /** Its log lines (pino JSON on stderr), parsed as they come. */
  lines: LogLine[];
  /** Everything it wrote to stderr, as written (log lines included). */
  stderr: string[];
  /** Everything it wrote to stdout: its results, never a log line. */
  stdout: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  waitForLine(pred: (l: LogLine) => boolean, what: string, timeoutMs?: number): Promise<LogLine>;
}

/**
 * Runs bin/<name> as a child with the given environment on top of a clean one (with bin/*'s
 * memory defaults already set unless `launcherApplies`: see memoryDefaultsEnv). Node 24
 * first on PATH (bin/* need type stripping). Its JSON log lines (stderr) are parsed as
 * they come; stdout is kept apart (results only).
 */
export function spawnBin(
  name: string,
  env: Record<string, string | undefined>,
  args: string[] = [],
  { launcherApplies = false }: { launcherApplies?: boolean } = {},
): Child {
  const child = spawn(path.join(ROOT, 'bin', name), args, {
    cwd: ROOT,
    env: {
      PATH: `${path.dirname(process.execPath)}:${process.env.PATH ?? ''}`,
      HOME: process.env.HOME ?? '/tmp',
      LOG_LEVEL: 'info',
      // vitest.config.ts's compile cache: a quicker start, the same process.
      NODE_COMPILE_CACHE: process.env.NODE_COMPILE_CACHE,
      // The launcher's memory defaults, given beforehand (one Node start, not two), unless
      // the test is about the launcher applying them.
      ...(launcherApplies ? {} : memoryDefaultsEnv(env)),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: LogLine[] = [];
  const stderr: string[] = [];
  const stdout: string[] = [];
  let buffered = '';
  child.stdout!.on('data', (chunk: Buffer) => stdout.push(chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr.push(chunk.toString());
    buffered += chunk.toString();
    const parts = buffered.split('\n');
    buffered = parts.pop() ?? '';
    for (const part of parts) {
      if (!part.trim()) continue;
      try {
        lines.push(JSON.parse(part));
      } catch {
        lines.push({ level: 'text', msg: part });
      }
    }
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return {
    process: child,
    lines,
    stderr,
    stdout,
    exited,
    // A hang guard: a process start on a loaded machine takes seconds, never a minute.
    waitForLine: (pred, what, timeoutMs = 60_000) =>
      waitFor(
        () => {
          if (child.exitCode !== null || child.signalCode !== null)
            throw new Error(`${name} exited while waiting for ${what}: ${stderr.join('')}`);
          return lines.find(pred);
        },
        { timeoutMs, what },
      ).catch((error: Error) => {
        // A timeout names what the child was doing instead: its last log lines. (An exit
        // already carries its whole stderr.)
        if (child.exitCode !== null || child.signalCode !== null) throw error;
        const tail = lines.slice(-20).map((l) => JSON.stringify(l).slice(0, 400));
        throw new Error(`${error.message}; ${name}'s last log lines:\n${tail.join('\n')}`, {
          cause: error,
        });
      }),
  };
}

/** Ends every child still running (SIGKILL: a test's leftovers need no grace) and waits for them. */
export async function killAll(children: Child[]): Promise<void> {
  for (const c of children) {
    if (c.process.exitCode === null && c.process.signalCode === null) c.process.kill('SIGKILL');
  }
  await Promise.all(children.map((c) => c.exited));
}
