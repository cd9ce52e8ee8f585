/**
 * What a comment in src/ or bin/ may cite: only what the repository holds, and an ADR at
 * most once a file, in its header. The rules, on a tree in memory (path → text):
 *
 * - no `DESIGN §` (a file the repository never held);
 * - no issue number: "issue 12", "issues 18/19", "#12", "item 3" (the tracker is not in the
 *   repository, and a reader cannot tell which item of which list);
 * - at most one ADR reference ("ADR 0123", "ADR-0123", "ADRs 0041, 0061" counts two,
 *   "docs/adr/0123-title.md"), and only inside the header comment: the first comment block
 *   of the file, with nothing before it but a shebang, blank lines and import statements.
 *
 * The whole text is read, strings and SQL comments too: a citation a reader meets in a log
 * line or a query is no easier to open. /work/wt/tools/adr-sweep.py (outside the
 * repository) rewrites a tree to these rules and uses the same patterns.
 */

export type CitationViolation =
  | { kind: 'design'; path: string; line: number; text: string }
  | { kind: 'issue'; path: string; line: number; text: string }
  | { kind: 'adr-outside-header'; path: string; line: number; text: string }
  | { kind: 'adr-more-than-one'; path: string; line: number; text: string; count: number };

/** A line break inside a comment: the newline, then the comment's margin (` * `, `// `). */
const WRAP = String.raw`(?:[ \t]*\n[ \t]*(?:\*(?!/)|//)?[ \t]*)`;
const SP = String.raw`(?:[ \t]+|${WRAP})`;
const NUM = String.raw`\d{4}`;
const ADR_GROUP = new RegExp(
  String.raw`\bADRs?(?:-|${SP})${NUM}` +
    `(?:(?:,${SP}?|${SP}(?:and|or)${SP}|/)(?:ADR(?:-|${SP}))?${NUM})*` +
    String.raw`(?:[ \t]*§[ \t]*\d+(?:\.\d+)*)?` +
    String.raw`|docs/adr/${NUM}[\w.-]*`,
  'g',
);
const DESIGN = new RegExp(String.raw`\bDESIGN(?:\.md)?${SP}?§|\bDESIGN\.md\b`, 'g');
const ISSUE = new RegExp(
  String.raw`\bissues?${SP}#?\d+|\bitem${SP}\d+\b|(?<![\w&#/])#\d{1,5}\b(?![\w-])`,
  'gi',
);

/** [start, end) of the header comment, or null when the file has none. */
export function headerSpan(text: string): [number, number] | null {
  let i = 0;
  if (text.startsWith('#!')) {
    const nl = text.indexOf('\n');
    i = nl < 0 ? text.length : nl + 1;
  }
  for (;;) {
    while (i < text.length && ' \t\r\n'.includes(text[i]!)) i++;
    if (!/^import\b/.test(text.slice(i, i + 7))) break;
    // An import statement ends at the first ';' that closes a line.
    const end = /;[ \t]*(?:\n|$)/g;
    end.lastIndex = i;
    const m = end.exec(text);
    if (!m) return null;
    i = m.index + m[0].length;
  }
  if (text.startsWith('/*', i)) {
    const end = text.indexOf('*/', i + 2);
    return end < 0 ? null : [i, end + 2];
  }
  if (text.startsWith('//', i)) {
    const run = /(?:[ \t]*\/\/[^\n]*(?:\n|$))+/y;
    run.lastIndex = i;
    const m = run.exec(text)!;
    return [i, i + m[0].length];
  }
  return null;
}

const lineAt = (text: string, at: number) => text.slice(0, at).split('\n').length;
const oneLine = (s: string) => s.replace(/\s+/g, ' ');

/** Every violation of the rules in `files`, but for paths under a prefix of `skip`. */
export function checkCitations(
  files: ReadonlyMap<string, string>,
  skip: readonly string[] = [],
): CitationViolation[] {
  const out: CitationViolation[] = [];
  for (const [path, text] of files) {
    if (skip.some((prefix) => path.startsWith(prefix))) continue;
    for (const m of text.matchAll(DESIGN)) {
      out.push({ kind: 'design', path, line: lineAt(text, m.index), text: oneLine(m[0]) });
    }
    for (const m of text.matchAll(ISSUE)) {
      out.push({ kind: 'issue', path, line: lineAt(text, m.index), text: oneLine(m[0]) });
    }
    const header = headerSpan(text);
    const refs = [...text.matchAll(ADR_GROUP)];
    let count = 0;
    for (const m of refs) {
      count += m[0].startsWith('docs/adr/') ? 1 : (m[0].match(/\d{4}/g) ?? []).length;
      const inHeader = header && header[0] <= m.index && m.index + m[0].length <= header[1];
      if (!inHeader) {
        out.push({
          kind: 'adr-outside-header',
          path,
          line: lineAt(text, m.index),
          text: oneLine(m[0]),
        });
      }
    }
    if (count > 1) {
      const first = refs[0]!;
      out.push({
        kind: 'adr-more-than-one',
        path,
        line: lineAt(text, first.index),
        text: refs.map((m) => oneLine(m[0])).join('; '),
        count,
      });
    }
  }
  return out;
}

const RULE: Record<CitationViolation['kind'], string> = {
  design: 'cites DESIGN §, a file the repository does not hold',
  issue: 'cites an issue or an item by number',
  'adr-outside-header': 'cites an ADR outside the header comment',
  'adr-more-than-one': 'cites more than one ADR',
};

/** One line a violation, for an assertion message; '' when there is none. */
export function formatCitations(violations: readonly CitationViolation[]): string {
  return violations.map((v) => `${v.path}:${v.line}: ${RULE[v.kind]}: ${v.text}`).join('\n');
}
