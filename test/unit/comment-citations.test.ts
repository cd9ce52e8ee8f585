import { describe, expect, it } from 'vitest';
import { checkCitations, formatCitations, headerSpan } from '../support/citations.ts';
import { ROOT } from '../support/cli.ts';
import { readCheckedFiles } from '../support/layers.ts';

/**
 * Comments in src/ and bin/ cite only what the repository holds: no `DESIGN §`, no issue
 * or item number, and at most one ADR a file, in its header comment (the rules, and their
 * proof on a tree in memory: test/support/citations.ts).
 */

describe('what comments cite', () => {
  const files = readCheckedFiles(ROOT);

  it('holds in src/ and bin/: no DESIGN §, no issue number, one ADR at most, in the header', () => {
    const violations = checkCitations(files);
    expect(formatCitations(violations), 'test/support/citations.ts').toBe('');
  });

  it('would fail each kind of citation added to this tree', () => {
    const broken = new Map(files);
    const append = (path: string, line: string) => {
      const text = broken.get(path);
      if (text === undefined) throw new Error(`${path} is not in the tree`);
      broken.set(path, `${text}\n${line}\n`);
    };
    append('src/app.ts', '// As DESIGN §4 says.');
    append('src/jobs/boss.ts', '/** Since issue 12, and #34, item 3. */');
    append('src/cli/worker.ts', '// The pool (ADR 0140).');
    // A header citing one ADR, and a second one wrapped across two lines.
    broken.set(
      'src/commits/new-file.ts',
      "import x from 'y';\n\n/** One cycle (ADR 0071). */\n/**\n * the bulk store path (ADR\n * 0040).\n */\n",
    );
    const found = checkCitations(broken)
      .map((v) => `${v.kind} ${v.path}`)
      .sort();
    expect(found).toEqual([
      'adr-more-than-one src/commits/new-file.ts',
      'adr-outside-header src/cli/worker.ts',
      'adr-outside-header src/commits/new-file.ts',
      'design src/app.ts',
      'issue src/jobs/boss.ts',
      'issue src/jobs/boss.ts',
      'issue src/jobs/boss.ts',
    ]);
    // A folder skipped is not read.
    broken.set('src/skipped/x.ts', '// DESIGN §3, issue 9 (ADR 0001, ADR 0002).\n');
    expect(checkCitations(broken, ['src/skipped/'])).toHaveLength(found.length);
    // Read, it breaks three rules: DESIGN §, an issue, two ADRs (both in its header).
    expect(checkCitations(broken)).toHaveLength(found.length + 3);
  });

  it('finds the header after a shebang and imports, and not past code', () => {
    const header = (text: string) => {
      const span = headerSpan(text);
      return span && text.slice(...span);
    };
    expect(
      header("#!/usr/bin/env node\nimport {\n  a,\n} from 'x';\n\n// one\n// two\nx();\n"),
    ).toBe('// one\n// two\n');
    expect(header("import a from 'a';\n/** doc */\nexport const b = 1;\n")).toBe('/** doc */');
    expect(header('export const b = 1;\n/** doc (ADR 0001) */\n')).toBeNull();
    expect(checkCitations(new Map([['src/x.ts', 'const a = 1; // ADR 0001\n']]))).toMatchObject([
      { kind: 'adr-outside-header', line: 1 },
    ]);
    // Not an issue: PKCS#8, an HTML entity, a colour, a budget key.
    expect(
      checkCitations(new Map([['src/x.ts', "// PKCS#8 '&#39;' #667085 `#graphql`\n"]])),
    ).toEqual([]);
  });
});
