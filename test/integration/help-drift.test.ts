import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { QUEUES } from '../../src/jobs/queue-names.ts';
import { ENV_VARS } from '../../src/platform/config/config.ts';
import { commitsEnabledFor } from '../../src/platform/config/source-spec.ts';
import { SOURCE_KINDS } from '../../src/platform/db/columns.ts';
import { type Exit, ROOT, runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { docPage } from '../support/docs.ts';
import { seedActivity } from '../support/status-factories.ts';

/**
 * Every command's --help says what docs/cli.md says of it, and both say what the command
 * does (a help that disagreed with the docs once told a new user the public source started
 * with commits off). Compared per command, both ways: the flags; the environment variables
 * a help names exist; bin/web's help and row name every route the server serves; bin/worker's
 * every queue its scheduler enqueues each tick; bin/status's every section it prints.
 */

const t = useTestDatabase();

const executables = readdirSync(join(ROOT, 'bin')).filter((f) =>
  statSync(join(ROOT, 'bin', f)).isFile(),
);

/** Sub-commands with a --help of their own, read with the command's. */
const SUBCOMMAND_HELP: Record<string, string[][]> = { sources: [['import', '--help']] };

/**
 * Every command's --help, read once for all tests, at most HELP_SPAWNS at a time: fifteen
 * Node processes, a second of CPU each, took over two minutes one after the other on a
 * loaded machine.
 */
const HELP_SPAWNS = 4;
const helpRuns = new Map<string, { argv: string[]; exit: Exit }[]>();
beforeAll(async () => {
  const queue = executables.flatMap((name) =>
    [['--help'], ...(SUBCOMMAND_HELP[name] ?? [])].map((argv) => ({ name, argv })),
  );
  const runs = queue.map(() => undefined as Exit | undefined);
  let next = 0;
  await Promise.all(
    Array.from({ length: HELP_SPAWNS }, async () => {
      while (next < queue.length) {
        const i = next++;
        runs[i] = await runBin(queue[i]!.name, queue[i]!.argv, {});
      }
    }),
  );
  queue.forEach(({ name, argv }, i) => {
    if (!helpRuns.has(name)) helpRuns.set(name, []);
    helpRuns.get(name)!.push({ argv, exit: runs[i]! });
  });
  // A hang guard: the work is some fifteen CPU-seconds, minutes only on a loaded machine.
}, 300_000);

function help(name: string): string {
  const runs = helpRuns.get(name) ?? [];
  expect(runs.length, `bin/${name} --help was run`).toBeGreaterThan(0);
  for (const { argv, exit } of runs) expect(exit.code, `bin/${name} ${argv.join(' ')}`).toBe(0);
  return runs.map((r) => r.exit.out).join('\n');
}

/** docs/cli.md's table rows whose first cell names bin/<name> (npm start's names bin/start). */
function cliRows(name: string): string {
  const rows = docPage('cli.md')
    .split('\n')
    .filter((l) => l.startsWith('| ') && new RegExp(`bin/${name}\\b`).test(l.split(' | ')[0]!));
  expect(rows.length, `docs/cli.md has no row for bin/${name}`).toBeGreaterThan(0);
  return rows.join('\n');
}

const flags = (text: string) =>
  [...new Set([...text.matchAll(/(?<![\w-])--[a-z][a-z-]*[a-z]/g)].map((m) => m[0]))]
    .filter((f) => f !== '--help')
    .sort();

/** Lower case, one space between words, markdown's backticks and escapes gone. */
const plain = (text: string) => text.toLowerCase().replace(/[`\\]/g, '').replace(/\s+/g, ' ');

describe('every --help against docs/cli.md', () => {
  it('has a row for every command, and each row names the same flags as its --help', async () => {
    const differ: string[] = [];
    for (const name of executables) {
      const inHelp = flags(help(name));
      const inRow = flags(cliRows(name));
      if (JSON.stringify(inHelp) !== JSON.stringify(inRow)) {
        differ.push(`bin/${name}: --help ${inHelp.join(' ')} | docs/cli.md ${inRow.join(' ')}`);
      }
    }
    expect(differ).toEqual([]);
  });

  it('names only environment variables the configuration reads', async () => {
    const known = new Set<string>(ENV_VARS);
    // Names a help may give that are not the project's settings: Node's, and an error code.
    const foreign = new Set(['NODE_OPTIONS', 'PATH', 'GITHUB_AUTH_FAILED']);
    const unknown: string[] = [];
    for (const name of executables) {
      for (const m of help(name).matchAll(/\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b/g)) {
        if (!known.has(m[0]) && !foreign.has(m[0])) unknown.push(`bin/${name}: ${m[0]}`);
      }
    }
    expect([...new Set(unknown)]).toEqual([]);
  });

  it('bin/web: every route the server serves is in its --help and its row', async () => {
    const server = readFileSync(join(ROOT, 'src/web/server.ts'), 'utf8');
    const served = [...server.matchAll(/route\('(?:GET|POST)', '([^']+)'/g)].map((m) => m[1]!);
    // `/archive` answers as `/archive/` does: one route to name.
    const routes = served.filter((r) => !served.includes(`${r}/`));
    expect(routes).toEqual(expect.arrayContaining(['/status', '/archive/', '/webhooks/github']));
    const text = help('web');
    const row = cliRows('web');
    for (const r of routes) {
      expect(text, `bin/web --help: ${r}`).toMatch(new RegExp(`(GET|POST) +${r}(\\s|$)`));
      expect(row, `docs/cli.md bin/web: ${r}`).toMatch(new RegExp(`\`((GET|POST) )?${r}\``));
    }
  });

  it('bin/worker: every queue its scheduler enqueues each tick, beside TICK_SECONDS in --help and its row', async () => {
    const scheduler = readFileSync(join(ROOT, 'src/jobs/scheduler.ts'), 'utf8');
    const everyTick = [...scheduler.matchAll(/#send\(QUEUES\.(\w+), this\.#tickSeconds\)/g)].map(
      (m) => QUEUES[m[1] as keyof typeof QUEUES],
    );
    expect(everyTick).toEqual(
      expect.arrayContaining([QUEUES.pollSources, QUEUES.reconcile, QUEUES.backfill]),
    );
    const text = plain(help('worker'));
    const row = plain(cliRows('worker'));
    for (const [what, said] of [
      ['--help', text],
      ['docs/cli.md', row],
    ] as const) {
      const sentence = said.split(/\.\s/).find((s) => s.includes('tick_seconds')) ?? '';
      for (const q of everyTick) expect(sentence, `${what}: ${q} every tick`).toContain(q);
    }
  });

  it('bin/sources: the commits default it states is the one sources are added with', async () => {
    const everyKind = SOURCE_KINDS.every((k) => commitsEnabledFor(k));
    expect(everyKind).toBe(true);
    const text = plain(help('sources'));
    const row = plain(cliRows('sources'));
    for (const said of [text, row]) {
      expect(said).toContain('on by default for every kind');
      expect(said).not.toMatch(/off (by default )?for public|public[^.;]*off by default/);
    }
  });

  describe('bin/status', () => {
    beforeAll(async () => {
      await seedActivity(t.db);
    });

    it('names every section it prints in its --help and its row', async () => {
      const r = await runBin('status', [], {
        DATABASE_URL: t.url,
        GITHUB_MODE: 'fixture',
        LOG_LEVEL: 'silent',
      });
      expect(r.code).toBe(0);
      // A section starts at the line's start with a capital: "Commits", "Runs (24h): …".
      const sections = [
        ...new Set(
          r.out
            .split('\n')
            .filter((l) => /^[A-Z][a-z]/.test(l) && !l.startsWith('github-push-ingestor'))
            .map((l) => /^([A-Z][A-Za-z ]*?)(?: \(|:|$)/.exec(l)![1]!.toLowerCase()),
        ),
      ];
      expect(sections).toEqual(
        expect.arrayContaining(['pushes', 'sources', 'commits', 'queues', 'webhooks']),
      );
      const text = plain(help('status'));
      const row = plain(cliRows('status'));
      expect(sections.filter((s) => !text.includes(s))).toEqual([]);
      expect(sections.filter((s) => !row.includes(s))).toEqual([]);
    });
  });
});
