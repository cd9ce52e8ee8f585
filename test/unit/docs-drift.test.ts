import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ALL_QUEUES } from '../../src/jobs/queue-names.ts';
import { ENV_VARS } from '../../src/platform/config/config.ts';
import { REQUEST_PURPOSES } from '../../src/platform/db/columns.ts';
import { ROOT, runBin } from '../support/cli.ts';
import {
  docPage,
  emittedLogEvents,
  firstCellNames,
  pageAnchors,
  section,
} from '../support/docs.ts';

/**
 * The manual cannot drift from the code: every variable the config parses is in
 * docs/configuration.md and nothing else is; every executable in bin/ and every flag its
 * --help lists is in docs/cli.md, and the page names no command that does not exist; every
 * log event the code emits is in docs/observability.md, and the page lists none it does not.
 * And the manual is one a newcomer can find things in: each variable has
 * its own anchor (configuration.md#github_token), every page.md#anchor link reaches a
 * heading, every `bin/… --flag` a page writes is one the command's --help lists, and the
 * prose names no ADR or issue outside a page's closing "Design records" section.
 * (Tables, views and metrics need a database: test/integration/docs-drift.test.ts.)
 */

/** `docs/../README.md` → `README.md`: a path inside the checkout, without `.` and `..`. */
function normalize(path: string): string {
  const out: string[] = [];
  for (const part of path.split('/')) {
    if (part === '..') out.pop();
    else if (part !== '.' && part !== '') out.push(part);
  }
  return out.join('/');
}

/** Every file under src/ and bin/ (where user-facing messages are written). */
function codeFiles(dir = `${ROOT}src`): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir)) {
    const path = `${dir}/${entry}`;
    if (statSync(path).isDirectory()) out.push(...codeFiles(path));
    else out.push(path);
  }
  return out;
}

/** The user-facing pages: README.md and docs/*.md (the ADRs under docs/adr/ are history). */
const manualPages = [
  'README.md',
  ...readdirSync(`${ROOT}docs`)
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

const executables = readdirSync(`${ROOT}bin`).filter((f) => statSync(`${ROOT}bin/${f}`).isFile());

describe('docs/configuration.md', () => {
  const names = firstCellNames(docPage('configuration.md'));

  it('documents every environment variable the config reads', () => {
    expect(ENV_VARS.filter((v) => !names.includes(v))).toEqual([]);
  });

  it('names no variable the config does not read', () => {
    const known = new Set<string>(ENV_VARS);
    expect(names.filter((n) => /^[A-Z][A-Z0-9_]+$/.test(n) && !known.has(n))).toEqual([]);
  });

  it('gives every variable its own section, reached as configuration.md#<name in lower case>', () => {
    const page = docPage('configuration.md');
    const anchors = pageAnchors(page);
    const headings = new Set(page.split('\n').filter((l) => /^#{2,4} `[A-Z0-9_]+`$/.test(l)));
    const lacking = ENV_VARS.filter(
      (v) =>
        !anchors.has(v.toLowerCase()) ||
        ![...headings].some((h) => h.endsWith(` \`${v}\``)) ||
        !page.includes(`| [\`${v}\`](#${v.toLowerCase()}) |`),
    );
    expect(lacking, 'a variable without its own heading, or not linked from the table').toEqual([]);
    // One section a variable: no heading for a variable the config does not read.
    const known = new Set<string>(ENV_VARS);
    const stray = [...headings].map((h) => h.replace(/^#+ `|`$/g, '')).filter((n) => !known.has(n));
    expect(stray).toEqual([]);
  });
});

describe('links between the pages of the manual', () => {
  const pages = manualPages;
  const anchorsOf = new Map<string, Set<string>>();
  /** The anchors of a page of the checkout (none when there is no such page). */
  const anchors = (page: string) => {
    let a = anchorsOf.get(page);
    if (!a) {
      a = existsSync(`${ROOT}${page}`)
        ? pageAnchors(readFileSync(`${ROOT}${page}`, 'utf8'))
        : new Set<string>();
      anchorsOf.set(page, a);
    }
    return a;
  };

  it('reach a heading that exists (page.md#anchor, #anchor)', () => {
    const broken: string[] = [];
    for (const page of pages) {
      const text = readFileSync(`${ROOT}${page}`, 'utf8');
      const dir = page.includes('/') ? page.slice(0, page.lastIndexOf('/') + 1) : '';
      for (const m of text.matchAll(/\]\(([^)\s#]*)#([^)\s]+)\)/g)) {
        const [file, anchor] = [m[1]!, m[2]!];
        if (/^[a-z]+:/.test(file) || (file !== '' && !file.endsWith('.md'))) continue;
        const target = file === '' ? page : normalize(dir + file);
        if (!anchors(target).has(anchor)) broken.push(`${page}: ${file}#${anchor}`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('the code names only anchors the manual has (docs/page.md#anchor in messages)', () => {
    const broken: string[] = [];
    for (const file of [...codeFiles(`${ROOT}src`), ...codeFiles(`${ROOT}bin`)]) {
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(/\bdocs\/([a-z-]+\.md)#([a-z0-9_-]+)/g)) {
        if (!anchors(`docs/${m[1]!}`).has(m[2]!)) broken.push(`${file}: docs/${m[1]}#${m[2]}`);
      }
    }
    expect(broken).toEqual([]);
  });
});

describe('docs/cli.md', () => {
  const page = docPage('cli.md');
  const rows = page.split('\n').filter((l) => l.startsWith('| '));

  it.each(executables)('has bin/%s and every flag of its --help in its row', async (name) => {
    const mine = rows.filter((l) => new RegExp(`bin/${name}\\b`).test(l.split('|')[1] ?? ''));
    expect(mine, `docs/cli.md has no row for bin/${name}`).not.toHaveLength(0);
    const help = await runBin(name, ['--help'], {});
    expect(help.code, help.err).toBe(0);
    const flags = [...new Set(help.out.match(/--[a-z][a-z-]+/g) ?? [])].filter(
      (f) => f !== '--help',
    );
    for (const flag of flags) expect(mine.join('\n'), `bin/${name} ${flag}`).toContain(flag);
  });

  it('names no command that bin/ does not have', () => {
    const named = [...new Set([...page.matchAll(/\bbin\/([a-z][a-z-]*)/g)].map((m) => m[1]!))];
    expect(named.filter((n) => n !== 'lib' && !executables.includes(n))).toEqual([]);
  });
});

describe('the prose says what happens, not how it was built', () => {
  const pages = manualPages;
  /** ADR numbers, this project's issue numbers, links into docs/adr/, build streams. */
  const history = /\bADRs? ?\d{3,4}\b|\b[Ii]ssues? #?\d+|\badr\/\d{4}-|\(stream [a-z-]+\)/;

  it('names no ADR or issue outside the one "Design records" section a page may end with', () => {
    const found: string[] = [];
    for (const page of pages) {
      const lines = readFileSync(`${ROOT}${page}`, 'utf8').split('\n');
      const records = lines.indexOf('## Design records');
      if (records >= 0 && lines.slice(records + 1).some((l) => /^#{1,2} /.test(l))) {
        found.push(`${page}: "## Design records" is not the last section`);
      }
      const prose = records >= 0 ? lines.slice(0, records) : lines;
      prose.forEach((line, i) => {
        const m = history.exec(line);
        if (m) found.push(`${page}:${i + 1}: ${m[0]}`);
      });
    }
    expect(found).toEqual([]);
  });
});

describe('commands written in the manual', () => {
  const pages = manualPages;
  /** Each `bin/NAME [sub] … --flag …` the pages write, up to the end of its command. */
  const uses: { page: string; name: string; sub: string | null; flag: string }[] = [];
  for (const page of pages) {
    const text = readFileSync(`${ROOT}${page}`, 'utf8');
    for (const m of text.matchAll(/\bbin\/([a-z][a-z-]*)((?:[ \t]+[^\s`|;&#)]+)*)/g)) {
      const args = m[2]!.trim().split(/\s+/).filter(Boolean);
      const sub = args[0] && /^[a-z]+$/.test(args[0]) ? args[0] : null;
      for (const arg of args) {
        const flag = /^[[(]*(--[a-z][a-z-]*)/.exec(arg)?.[1];
        if (flag) uses.push({ page, name: m[1]!, sub, flag });
      }
    }
  }

  it('are there to check', () => {
    expect(uses.length).toBeGreaterThan(20);
  });

  it('use only flags the command (or its subcommand) lists in --help', async () => {
    const helps = new Map<string, string>();
    const help = async (argv: string[]) => {
      const key = argv.join(' ');
      if (!helps.has(key)) helps.set(key, (await runBin(argv[0]!, argv.slice(1), {})).out);
      return helps.get(key)!;
    };
    const unknown: string[] = [];
    for (const u of uses) {
      if (!executables.includes(u.name)) continue; // "names no command" tests that
      const listed = (text: string) => new RegExp(`${u.flag}(?![a-z-])`).test(text);
      if (listed(await help([u.name, '--help']))) continue;
      if (u.sub && listed(await help([u.name, u.sub, '--help']))) continue;
      unknown.push(`${u.page}: bin/${u.name}${u.sub ? ` ${u.sub}` : ''} ${u.flag}`);
    }
    expect(unknown).toEqual([]);
  }, 120_000);
});

describe('docs/observability.md', () => {
  const page = docPage('observability.md');
  const documented = firstCellNames(section(page, 'Log events')).flatMap((cell) =>
    cell.split(/\s*\/\s*|,\s*/).filter((n) => /^[a-z][a-z0-9_]*\.[a-z0-9_.*]+$/.test(n)),
  );
  const { literal, patterns } = emittedLogEvents();

  it('lists every log event the code emits', () => {
    const missing = [...literal].filter((e) => !documented.includes(e)).sort();
    expect(missing).toEqual([]);
    for (const p of patterns) {
      expect(
        documented.some((d) => p.test(d)),
        `no documented event matches ${p}`,
      ).toBe(true);
    }
  });

  it('lists no log event the code does not emit', () => {
    const emitted = (name: string) => literal.has(name) || patterns.some((p) => p.test(name));
    expect(documented.filter((d) => !emitted(d))).toEqual([]);
  });
});

describe('docs/operations.md queues', () => {
  const page = docPage('operations.md');

  it('has a row for every pg-boss queue, and for none that does not exist', () => {
    const rows = page.split('\n').filter((l) => l.startsWith('| `'));
    const named = rows
      .map((l) => firstCellNames(l))
      .filter((names) => names.some((n) => (ALL_QUEUES as readonly string[]).includes(n)))
      .flat();
    expect([...new Set(named)].sort()).toEqual([...ALL_QUEUES].sort());
  });

  it('never counts the queues in words (a count goes stale when one is added)', async () => {
    const counted = /\b(one|two|three|four|five|six|seven|eight|nine|ten|\d+) pg-boss queues\b/i;
    const help = await runBin('worker', ['--help'], {});
    for (const [where, text] of [
      ['docs/operations.md', page],
      ['README.md', readFileSync(`${ROOT}README.md`, 'utf8')],
      ['bin/worker --help', help.out],
    ] as const) {
      expect(counted.exec(text)?.[0] ?? null, where).toBeNull();
    }
    for (const q of ALL_QUEUES) expect(help.out, q).toContain(q);
  });
});

describe('docs/observability.md purposes', () => {
  it('every `purpose` label list names every request purpose', () => {
    const lists = [...docPage('observability.md').matchAll(/`purpose` \(([^)]*)\)/g)].map(
      (m) => m[1]!,
    );
    expect(lists.length).toBeGreaterThan(0);
    for (const list of lists) {
      for (const p of REQUEST_PURPOSES)
        expect(list, `a purpose list lacks ${p}`).toContain(`\`${p}\``);
    }
  });
});

describe('the ADR index (docs/adr/README.md)', () => {
  const dir = `${ROOT}docs/adr`;
  const index = readFileSync(`${dir}/README.md`, 'utf8');
  const records = readdirSync(dir)
    .filter((f) => /^\d{4}-.+\.md$/.test(f))
    .sort();
  /** `- [0009](0009-ingest-throughput.md) **Title.** What it decided. *Amended by [0040](…).*` */
  const entries = index
    .split('\n')
    .filter((l) => l.startsWith('- ['))
    .map((line) => {
      const m = /^- \[(\d{4})\]\(([^)]+)\) \*\*(.+?)\.\*\* (.*)$/.exec(line);
      return { line, number: m?.[1], file: m?.[2], title: m?.[3], rest: m?.[4] ?? '' };
    });
  /** A link to a record: `[0040](0040-….md)` in the index, `[ADR 0040](0040-….md)` in a mark. */
  const LINK = /\[(?:ADR )?(\d{4})\]\((\d{4}-[^)]+\.md)\)/g;
  /** `amended by [0040](…), [0175](…); superseded in part by …` → "amended 0040", …, sorted. */
  const laterIn = (text: string) => {
    const out: string[] = [];
    for (const part of text.matchAll(/(amended|superseded in part|superseded) by ([^;*]*)/gi)) {
      for (const l of part[2]!.matchAll(LINK)) out.push(`${part[1]!.toLowerCase()} ${l[1]}`);
    }
    return out.sort();
  };

  it('holds only records named NNNN-what.md and this index', () => {
    const others = readdirSync(dir).filter((f) => f !== 'README.md' && !records.includes(f));
    expect(others).toEqual([]);
  });

  it('lists every record once, in number order, under its own number and title', () => {
    expect(
      entries.filter((e) => e.number === undefined).map((e) => e.line),
      'an entry not shaped "- [NNNN](file) **Title.** What it decided."',
    ).toEqual([]);
    expect(entries.map((e) => e.file)).toEqual(records);
    for (const e of entries) {
      expect(e.file!.slice(0, 4), e.line).toBe(e.number);
      const title = readFileSync(`${dir}/${e.file}`, 'utf8').split('\n')[0]!;
      expect(title.replace(/^# \d{4}(?: —|:) /, ''), e.file).toBe(e.title);
      expect(e.rest.length, `${e.file}: one sentence of what it decided`).toBeGreaterThan(20);
    }
  });

  it('names only records that exist, each under its own number', () => {
    const bad = [...index.matchAll(/\[([^\]]*)\]\((\d{4}-[^)]+\.md)\)/g)]
      .filter(([, text, file]) => !records.includes(file!) || !text!.includes(file!.slice(0, 4)))
      .map(([link]) => link);
    expect(bad).toEqual([]);
  });

  it("says which later records changed each one, as the record's own top says", () => {
    const wrong: string[] = [];
    for (const e of entries) {
      const lines = readFileSync(`${dir}/${e.file}`, 'utf8').split('\n');
      const end = lines.findIndex((l) => l.startsWith('## '));
      // The marks: the paragraphs under the title that begin "*Amended by [ADR NNNN](…):" or
      // "*Superseded [in part] by [ADR NNNN](…):", one a later record.
      const marks = lines
        .slice(1, end < 0 ? lines.length : end)
        .filter((l) => /^\*(Amended|Superseded(?: in part)?) by \[ADR \d{4}\]/.test(l))
        .flatMap((l) => laterIn(/^\*([^:]*):/.exec(l)![1]!))
        .sort();
      // The index: the italic sentence that ends the record's line.
      const listed = laterIn(/\*([^*]+)\*$/.exec(e.rest)?.[1] ?? '');
      if (marks.join() !== listed.join()) {
        wrong.push(
          `${e.file}: its top says [${marks.join(', ')}], the index [${listed.join(', ')}]`,
        );
      }
      for (const m of [...marks, ...listed]) {
        if (m.slice(-4) <= e.number!) wrong.push(`${e.file}: ${m} is not a later record`);
      }
    }
    expect(wrong).toEqual([]);
  });
});
