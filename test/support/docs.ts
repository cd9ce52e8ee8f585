import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './cli.ts';

/**
 * What the manual (docs/) says, read the way the drift tests compare it with the code:
 * a page's sections, the first cell of each table row in them, and the names the code
 * itself emits (log events) — so a name added to one side and not the other fails a test.
 */

export function docPage(name: string): string {
  return readFileSync(join(ROOT, 'docs', name), 'utf8');
}

/** The text from the heading that starts with `heading` to the next heading of its level or higher. */
export function section(page: string, heading: string): string {
  const lines = page.split('\n');
  const start = lines.findIndex((l) => /^#+ /.test(l) && l.replace(/^#+ /, '').startsWith(heading));
  if (start < 0) throw new Error(`no section "${heading}"`);
  const level = lines[start]!.indexOf(' ');
  let end = lines.length;
  for (let i = start + 1; i < lines.length; i++) {
    const m = /^(#+) /.exec(lines[i]!);
    if (m && m[1]!.length <= level) {
      end = i;
      break;
    }
  }
  return lines.slice(start, end).join('\n');
}

/** The backticked names in the first cell of each table row of `text` (header rows skipped). */
export function firstCellNames(text: string): string[] {
  const names: string[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('| ') || line.startsWith('|---')) continue;
    const cell = line.split('|')[1] ?? '';
    for (const m of cell.matchAll(/`([^`]+)`/g)) names.push(m[1]!);
  }
  return names;
}

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) out.push(...sourceFiles(path));
    else if (path.endsWith('.ts')) out.push(path);
  }
  return out;
}

/**
 * Every log event the code can emit: each `event: '<name>'` literal under src/ and bin/,
 * and each template literal (`${role}.hints_disabled`) as a pattern.
 */
export function emittedLogEvents(): { literal: Set<string>; patterns: RegExp[] } {
  const literal = new Set<string>();
  const patterns: RegExp[] = [];
  for (const file of [...sourceFiles(join(ROOT, 'src')), ...sourceFiles(join(ROOT, 'bin'))]) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/\bevent: '([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+)'/g))
      literal.add(m[1]!);
    for (const m of text.matchAll(/\bevent: `([^`]+)`/g)) {
      const re = m[1]!
        .split(/\$\{[^}]+\}/)
        .map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
        .join('[a-z_]+');
      patterns.push(new RegExp(`^${re}$`));
    }
  }
  return { literal, patterns };
}

/**
 * The anchor GitHub gives a heading (github-slugger's rule): its text without markup, lower
 * case, punctuation other than `-` and `_` dropped, each space a `-`.
 */
export function headingSlug(heading: string): string {
  return heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/**
 * Every anchor a link can reach in `page`: each heading's slug (a repeated one numbered
 * `-1`, `-2` as GitHub does) and each explicit `<a id="…">` / `<a name="…">`. Code blocks are
 * skipped: a `#` line in one is not a heading.
 */
export function pageAnchors(page: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of page.split('\n')) {
    if (/^```/.test(line)) fenced = !fenced;
    if (fenced) continue;
    const h = /^#{1,6} (.*?)\s*#*\s*$/.exec(line);
    if (h) {
      const slug = headingSlug(h[1]!);
      const n = seen.get(slug) ?? 0;
      anchors.add(n === 0 ? slug : `${slug}-${n}`);
      seen.set(slug, n + 1);
    }
    for (const m of line.matchAll(/<a (?:id|name)="([^"]+)"/g)) anchors.add(m[1]!);
  }
  return anchors;
}
