import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import type { KyselyPlugin } from 'kysely';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli/sources.ts';
import { UsageError } from '../../src/platform/errors.ts';
import {
  importSources,
  MAX_LINE_CHARS,
  MAX_LINES,
  parseSourceLines,
} from '../../src/store/sources-import.ts';
import { captureMain, ROOT, runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';

/** `bin/sources import FILE|-` against real Postgres. */

const t = useTestDatabase();
const dir = mkdtempSync(path.join(tmpdir(), 'sources-import-'));
const env = () => ({ DATABASE_URL: t.url, GITHUB_MODE: 'live', LOG_LEVEL: 'silent' });

beforeAll(() => {
  for (const [k, v] of Object.entries(env())) vi.stubEnv(k, v);
});
beforeEach(async () => {
  await t.db.deleteFrom('event_sources').execute();
});
afterEach(() => {
  vi.restoreAllMocks();
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

let fileSeq = 0;
function file(text: string): string {
  const p = path.join(dir, `sources-${++fileSeq}.txt`);
  writeFileSync(p, text);
  return p;
}

const run = (argv: string[]) => captureMain(main, ['import', ...argv]);

async function sources() {
  return t.db
    .selectFrom('event_sources')
    .select(['id', 'kind', 'target', 'mode', 'enabled'])
    .orderBy('id')
    .execute();
}

/** bin/sources with `input` on its standard input. */
function withStdin(argv: string[], input: string) {
  return new Promise<{ code: number; out: string; err: string }>((resolve, reject) => {
    const child = spawn(path.join(ROOT, 'bin', 'sources'), argv, {
      cwd: ROOT,
      env: {
        ...process.env,
        PATH: `${path.dirname(process.execPath)}:${process.env.PATH}`,
        ...env(),
      },
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      err += d;
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? 1, out, err }));
    child.stdin.end(input);
  });
}

describe('bin/sources import', () => {
  it('adds the valid lines, reports bad ones by line number and exits 1', async () => {
    const hostile = `repo:${'x'.repeat(300)}\u001b[31m/evil`;
    const p = file(
      [
        '# watched repositories', // 1
        'repo:octocat/Hello-World', // 2
        '', // 3
        'org:github   # the org feed', // 4
        'repo:not-a-repo', // 5
        'user:torvalds', // 6
        'team:nobody', // 7
        hostile, // 8
        'public', // 9
        'x'.repeat(MAX_LINE_CHARS + 1), // 10
      ].join('\n'),
    );
    const r = await run([p]);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/: 4 added, 0 already there, 4 invalid/);
    expect(r.out).toMatch(/line 5: "repo:not-a-repo": repo "not-a-repo" is not OWNER\/NAME/);
    expect(r.out).toMatch(/line 7: "team:nobody": unknown source kind "team"/);
    expect(r.out).toMatch(
      new RegExp(`line 10: "x{80}…": longer than ${MAX_LINE_CHARS} characters`),
    );
    // A hostile line is echoed bounded, with its escape sequence made harmless.
    const echoed = r.out.split('\n').find((l) => l.startsWith('  line 8: '))!;
    expect(echoed).not.toContain('\u001b');
    expect(echoed.length).toBeLessThan(ECHO_LINE_MAX);
    expect(echoed).toMatch(/: repo owner "x{40}…"(…\(\d+ characters\))? is not a GitHub login/);
    expect((await sources()).map((s) => [s.kind, s.target])).toEqual([
      ['repo', 'octocat/Hello-World'],
      ['org', 'github'],
      ['user', 'torvalds'],
      ['public', null],
    ]);
  });

  it('counts duplicates once, in the file and against what is there, ignoring case', async () => {
    await run([file('repo:octocat/Hello-World\n')]);
    const r = await run([
      '--json',
      file('REPO:OctoCat/hello-world\norg:GitHub\norg:github\nrepo:octocat/hello-world\r\n'),
    ]);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out);
    expect(j).toMatchObject({
      added_count: 1,
      existing_count: 1,
      invalid_count: 0,
      duplicates: [
        { line: 3, first_line: 2 },
        { line: 4, first_line: 1 },
      ],
    });
    expect(j.added[0]).toMatchObject({ kind: 'org', target: 'GitHub', line: 2 });
    expect(j.existing[0]).toMatchObject({ target: 'octocat/Hello-World', line: 1, enabled: true });
    expect(await sources()).toHaveLength(2);
    // Again: idempotent.
    const again = JSON.parse(
      (await run(['--json', file('org:github\nrepo:octocat/Hello-World')])).out,
    );
    expect(again).toMatchObject({ added_count: 0, existing_count: 2 });
    expect(await sources()).toHaveLength(2);
  });

  it('reads standard input with -, as one JSON document', async () => {
    const r = await withStdin(
      ['import', '-', '--json'],
      'public\nrepo:a-b/c.d\n\n# nothing\nuser:bad_login\n',
    );
    expect(r.code).toBe(1);
    const j = JSON.parse(r.out);
    expect(j).toMatchObject({ file: '-', lines: 5, added_count: 2, invalid_count: 1 });
    expect(j.invalid[0]).toMatchObject({ line: 5, text: 'user:bad_login' });
    expect(await sources()).toHaveLength(2);
  });

  it('--disable-missing makes the file the whole list; --dry-run writes nothing', async () => {
    await run([file('repo:keep/one\nrepo:drop/two\norg:drop-three\nuser:back-again\n')]);
    const back = (await sources()).find((s) => s.target === 'back-again')!;
    await t.db
      .updateTable('event_sources')
      .set({ enabled: false })
      .where('id', '=', back.id)
      .execute();
    const list = file('repo:KEEP/one\nuser:back-again\nrepo:new/four\n');

    const dry = JSON.parse((await run(['--disable-missing', '--dry-run', '--json', list])).out);
    expect(dry).toMatchObject({
      dry_run: true,
      added_count: 1,
      disabled_count: 2,
      enabled_count: 1,
    });
    expect(dry.added[0]).toMatchObject({ id: null, target: 'new/four' });
    expect((await sources()).map((s) => s.enabled)).toEqual([true, true, true, false]);

    const r = await run(['--disable-missing', list]);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/1 added, 2 already there, 0 invalid/);
    expect(r.out).toMatch(/disabled \(not in the file\): 2/);
    expect(r.out).toMatch(/enabled again \(named by the file\): 1/);
    expect(Object.fromEntries((await sources()).map((s) => [s.target, s.enabled]))).toEqual({
      'keep/one': true,
      'drop/two': false,
      'drop-three': false,
      'back-again': true,
      'new/four': true,
    });
    // A list with nothing valid would disable everything: refused before any change, even
    // with --force.
    for (const force of [[], ['--force']]) {
      const empty = await run(['--disable-missing', ...force, file('# empty\n')]);
      expect(empty.code).toBe(2);
      expect(empty.err).toMatch(/would disable every source; refusing, nothing was changed/);
    }
    expect((await sources()).filter((s) => s.enabled)).toHaveLength(3);
    await expect(run(['--force', list])).rejects.toThrow(UsageError);
  });

  it('--disable-missing refuses a file with one typo (exit 2, nothing changed) unless --force', async () => {
    await run([file('repo:keep/one\nrepo:keep/two\norg:other\n')]);
    const before = await sources();
    const typo = file('repo:keep/one\nrepo:keep/tw o\n'); // line 2 meant keep/two
    const r = await run(['--disable-missing', typo]);
    expect(r.code).toBe(2);
    expect(r.out).toMatch(/invalid lines: 1\n {2}line 2: "repo:keep\/tw o": repo name "tw o"/);
    expect(r.err).toMatch(
      /--disable-missing refused: 1 invalid line\(s\) \(first: line 2\); nothing was changed\. Fix them, or add --force/,
    );
    expect(await sources()).toEqual(before);
    // --json says the same as one document.
    const j = await run(['--disable-missing', '--json', typo]);
    expect(j.code).toBe(2);
    expect(JSON.parse(j.out)).toMatchObject({
      valid_count: 1,
      invalid_count: 1,
      invalid: [{ line: 2 }],
      refused: expect.stringMatching(/nothing was changed/),
    });
    expect(await sources()).toEqual(before);
    // --force: the operator means it; the typo's source and the unnamed one are disabled.
    const forced = await run(['--disable-missing', '--force', typo]);
    expect(forced.code).toBe(1);
    expect(forced.out).toMatch(/disabled \(not in the file\): 2/);
    expect(Object.fromEntries((await sources()).map((s) => [s.target, s.enabled]))).toEqual({
      'keep/one': true,
      'keep/two': false,
      other: false,
    });
  });

  it('takes the bin/sources add form beside the SOURCES form', async () => {
    const r = await run([
      '--json',
      file(
        [
          'repo octocat/Hello-World',
          'org\tgithub # tab-separated',
          'user   torvalds',
          'public',
          'repo :a-b/c.d',
          'octocat/Spoon-Knife', // no kind: invalid, with a hint
          'repo octocat hello', // three words
        ].join('\n'),
      ),
    ]);
    expect(r.code).toBe(1);
    const j = JSON.parse(r.out);
    expect(j.added.map((a: { kind: string; target: string }) => [a.kind, a.target])).toEqual([
      ['repo', 'octocat/Hello-World'],
      ['org', 'github'],
      ['user', 'torvalds'],
      ['public', null],
      ['repo', 'a-b/c.d'],
    ]);
    expect(j.invalid).toEqual([
      {
        line: 6,
        text: 'octocat/Spoon-Knife',
        reason:
          'no kind: a repository is written repo:octocat/Spoon-Knife or repo octocat/Spoon-Knife',
      },
      { line: 7, text: 'repo octocat hello', reason: expect.stringMatching(/not OWNER\/NAME/) },
    ]);
  });

  it('echoes bidirectional overrides and invisible characters escaped, never raw', async () => {
    const trojan = 'user:evil\u202Eexe.txt\u2066\u200b';
    const r = await run([file(`${trojan}\n`)]);
    expect(r.code).toBe(1);
    expect(r.out).toContain('line 1: "user:evil\\u202eexe.txt\\u2066\\u200b": user "evil\\u202e');
    expect(r.out).not.toMatch(/[\u202a-\u202e\u2066-\u2069\u200b]/);
    // bin/sources add quotes its argument the same way in its usage error.
    const add = await runBin('sources', ['add', 'user', 'evil\u202Eexe'], env());
    expect(add.code).toBe(2);
    expect(add.err).toContain('user "evil\\u202eexe" is not a GitHub login');
    expect(add.err).not.toContain('\u202e');
  });

  it("the red team's case: 99,990 repositories without the repo: prefix disable nothing", async () => {
    const seeded = file('repo:keep/one\nrepo:keep/two\norg:github\nuser:torvalds\npublic\n');
    await run([seeded]);
    const before = await sources();
    const names = Array.from({ length: 99_990 }, (_, i) => `owner-${i % 997}/repo-${i}`);
    const bare = file(`${names.join('\n')}\nrepo:keep/one\n`);
    const refused = await runBin('sources', ['import', '--disable-missing', bare], env());
    expect(refused.code).toBe(2);
    expect(refused.out).toMatch(/^invalid lines: 99990\n {2}line 1: "owner-0\/repo-0": no kind/);
    expect(refused.err).toMatch(/--disable-missing refused: 99990 invalid line\(s\)/);
    expect(await sources()).toEqual(before);
    // The same list written as bin/sources add takes it is the whole list, as meant.
    const addForm = file(`${names.map((n) => `repo ${n}`).join('\n')}\nrepo keep/one\n`);
    const ok = await runBin('sources', ['import', '--disable-missing', '--json', addForm], env());
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.out)).toMatchObject({
      added_count: 99_990,
      existing_count: 1,
      invalid_count: 0,
      disabled_count: 4,
    });
    const counts = await t.db
      .selectFrom('event_sources')
      .select((eb) => [eb.fn.countAll<string>().as('n'), 'enabled'])
      .groupBy('enabled')
      .execute();
    expect(Object.fromEntries(counts.map((c) => [String(c.enabled), Number(c.n)]))).toEqual({
      true: 99_991,
      false: 4,
    });
  }, 180_000);

  it('10,000 lines: a few statements, not 10,000 round trips; the real bin agrees', async () => {
    const lines = Array.from({ length: 10_000 }, (_, i) => `repo:owner-${i % 97}/repo-${i}`);
    let statements = 0;
    const counting: KyselyPlugin = {
      transformQuery: (a) => {
        statements++;
        return a.node;
      },
      transformResult: async (a) => a.result,
    };
    const parsed = await parseSourceLines(Readable.from([Buffer.from(lines.join('\n'))]));
    expect(parsed.specs).toHaveLength(10_000);
    const result = await importSources(t.db.withPlugin(counting), parsed.specs, 'live', {
      disableMissing: true,
      dryRun: false,
    });
    expect(result.added).toHaveLength(10_000);
    expect(result.added[9_999]).toMatchObject({ line: 10_000, target: 'owner-8/repo-9999' });
    expect(statements).toBeLessThanOrEqual(4);
    expect(await sources()).toHaveLength(10_000);

    // The same file through bin/sources: all already there, nothing added or disabled.
    const bin = await runBin('sources', ['import', '--json', file(lines.join('\n'))], env());
    expect(bin.code).toBe(0);
    expect(JSON.parse(bin.out)).toMatchObject({
      added_count: 0,
      existing_count: 10_000,
      existing_truncated: true,
    });
  });

  it('refuses more than MAX_LINES lines whole, with a clear error and nothing written', async () => {
    const p = file('public\n'.repeat(MAX_LINES + 1));
    const r = await runBin('sources', ['import', p], env());
    expect(r.code).toBe(2);
    expect(r.err).toMatch(
      new RegExp(`more than ${MAX_LINES} lines: split the file; nothing was imported`),
    );
    expect(await sources()).toHaveLength(0);
    const missing = await runBin('sources', ['import', path.join(dir, 'nope.txt')], env());
    expect(missing.code).toBe(1);
    expect(missing.err).toMatch(/cannot read .*nope\.txt: ENOENT/);
    const help = await runBin('sources', ['import', '--help'], env());
    expect(help.out).toMatch(/valid ones are still\s+added/);
  });
});

/** "  line 8: " + quotes + 80 echoed characters (escaped) + ": " + the reason. */
const ECHO_LINE_MAX = 400;
