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
