import { readdirSync, readFileSync, statSync } from 'node:fs';
import { posix } from 'node:path';
import ts from 'typescript';

/**
 * The layer checker: reads the import graph of src/ and bin/ and says, in a list a reader can
 * act on, where it breaks a layer table. The table is data (`LayerTable`): each layer names
 * its rank and the paths it holds (a folder ending in `/`, or one file). The rules:
 *
 * - a file sits in exactly one layer: the longest path in the table that covers it (a file
 *   no row covers is a violation, so a new file must be placed);
 * - a module imports only from its own layer or a lower rank (an upward import fails);
 * - layers that share a rank are siblings (the pipelines) and never import each other;
 * - no file-level cycle, type-only imports included: `import type` is erased at run time,
 *   but a reader following the imports still walks in a circle, and the fix (move the type
 *   to the module both sides can import) is always small;
 * - no src module over `maxLines` lines;
 * - no src module re-exports what another defines (`export … from`, or `export { x }` of an
 *   imported `x`): such a shim keeps an old path alive, and importers should name the module
 *   that defines the name;
 * - the executables in bin/ import only their entry paths (src/cli/ and bin/lib/).
 *
 * Every literal specifier counts: `import … from`, `import '…'`, `export … from`, `import()`
 * and a type's `import('…')`. A specifier that is not relative (a package, `node:`) is
 * outside the graph. `new URL('…', import.meta.url)` — the file a forked child or a worker
 * thread runs — is not an import (starting a process loads nothing into this one; the
 * child is an entry point like bin/'s), so it takes no part in the layer and cycle rules;
 * but it must name a file that exists, because nothing else checks it before run time.
 */

export interface Layer {
  layer: string;
  rank: number;
  /** Layers sharing a rank must all say so: they are siblings that never import each other. */
  siblings?: true;
  /** Folders (`src/poll/`) and files (`src/app.ts`) this layer holds. */
  paths: readonly string[];
}

export type LayerTable = readonly Layer[];

export interface ImportSite {
  specifier: string;
  line: number;
  typeOnly: boolean;
  /** 'url': a `new URL(…, import.meta.url)` reference, checked only to exist. */
  via: 'import' | 'url';
}

export interface Edge extends ImportSite {
  from: string;
  to: string;
}

export type Violation =
  | { kind: 'table'; message: string }
  | { kind: 'unplaced'; file: string }
  | { kind: 'unresolved'; file: string; line: number; specifier: string }
  | { kind: 'upward'; edge: Edge; fromLayer: string; toLayer: string }
  | { kind: 'sideways'; edge: Edge; fromLayer: string; toLayer: string }
  | { kind: 'cycle'; files: string[]; edges: Edge[] }
  | { kind: 'too-long'; file: string; lines: number }
  | { kind: 'reexport'; file: string; line: number; names: string[] }
  | { kind: 'entry'; edge: Edge };

export interface CheckOptions {
  /** Path (from the repository root, with `/`) → source text; src/ and bin/ files. */
  files: ReadonlyMap<string, string>;
  table: LayerTable;
  /** A src/ module longer than this fails. */
  maxLines: number;
  /** Where bin/ may import (path prefixes). */
  entryPaths?: readonly string[];
}

/** Every literal import specifier in one file, with its line and whether it is type-only. */
export function importSites(path: string, text: string): ImportSite[] {
  const kind = /\.(c|m)?js$|^bin\/[^/.]+$/.test(path) ? ts.ScriptKind.JS : ts.ScriptKind.TS;
  const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true, kind);
  const sites: ImportSite[] = [];
  const add = (literal: ts.Node, typeOnly: boolean, via: ImportSite['via'] = 'import') => {
    if (!ts.isStringLiteralLike(literal)) return;
    const line = source.getLineAndCharacterOfPosition(literal.getStart(source)).line + 1;
    sites.push({ specifier: literal.text, line, typeOnly, via });
  };
  const visit = (node: ts.Node) => {
    if (ts.isImportDeclaration(node)) {
      const clause = node.importClause;
      const named = clause?.namedBindings;
      const allTypes =
        clause !== undefined &&
        (clause.isTypeOnly ||
          (clause.name === undefined &&
            named !== undefined &&
            ts.isNamedImports(named) &&
            named.elements.length > 0 &&
            named.elements.every((e) => e.isTypeOnly)));
      add(node.moduleSpecifier, allTypes);
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier) {
      const clause = node.exportClause;
      const allTypes =
        node.isTypeOnly ||
        (clause !== undefined &&
          ts.isNamedExports(clause) &&
          clause.elements.length > 0 &&
          clause.elements.every((e) => e.isTypeOnly));
      add(node.moduleSpecifier, allTypes);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      if (node.arguments[0]) add(node.arguments[0], false);
    } else if (ts.isImportTypeNode(node)) {
      const arg = node.argument;
      if (ts.isLiteralTypeNode(arg)) add(arg.literal, true);
    } else if (
      ts.isNewExpression(node) &&
      ts.isIdentifier(node.expression) &&
      node.expression.text === 'URL' &&
      node.arguments?.length === 2 &&
      node.arguments[1]!.getText(source) === 'import.meta.url'
    ) {
      add(node.arguments[0]!, false, 'url');
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return sites;
}

/**
 * Where a module re-exports names another src module defines, with the names (`*` for all).
 * A package's name given a home here (pino's Logger as ours) is not a shim: only relative
 * imports count.
 */
export function reexportSites(path: string, text: string): { line: number; names: string[] }[] {
  const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const imported = new Set<string>();
  const relative = (node: ts.Expression) =>
    ts.isStringLiteral(node) && (node.text.startsWith('./') || node.text.startsWith('../'));
  for (const st of source.statements) {
    if (!ts.isImportDeclaration(st) || !st.importClause || !relative(st.moduleSpecifier)) continue;
    const clause = st.importClause;
    if (clause.name) imported.add(clause.name.text);
    const named = clause.namedBindings;
    if (named && ts.isNamedImports(named))
      for (const e of named.elements) imported.add(e.name.text);
    if (named && ts.isNamespaceImport(named)) imported.add(named.name.text);
  }
  const sites: { line: number; names: string[] }[] = [];
  for (const st of source.statements) {
    if (!ts.isExportDeclaration(st)) continue;
    const line = source.getLineAndCharacterOfPosition(st.getStart(source)).line + 1;
    const clause = st.exportClause;
    if (st.moduleSpecifier) {
      if (!relative(st.moduleSpecifier)) continue;
      const names =
        clause && ts.isNamedExports(clause) ? clause.elements.map((e) => e.name.text) : ['*'];
      sites.push({ line, names });
    } else if (clause && ts.isNamedExports(clause)) {
      const names = clause.elements
        .filter((e) => imported.has((e.propertyName ?? e.name).text))
        .map((e) => e.name.text);
      if (names.length > 0) sites.push({ line, names });
    }
  }
  return sites;
}

/** The repository path a relative specifier names, or undefined for a package or `node:`. */
export function resolveSpecifier(from: string, specifier: string): string | undefined {
  if (!specifier.startsWith('./') && !specifier.startsWith('../')) return undefined;
  return posix.normalize(posix.join(posix.dirname(from), specifier));
}

/** The layer that holds `file`: the longest path of the table that covers it. */
export function layerOf(table: LayerTable, file: string): Layer | undefined {
  let best: Layer | undefined;
  let bestLength = -1;
  for (const layer of table) {
    for (const path of layer.paths) {
      const covers = path.endsWith('/') ? file.startsWith(path) : file === path;
      if (covers && path.length > bestLength) {
        best = layer;
        bestLength = path.length;
      }
    }
  }
  return best;
}

/** The import edges between the given files (edges that leave the set are dropped). */
export function importEdges(files: ReadonlyMap<string, string>): {
  edges: Edge[];
  unresolved: Violation[];
} {
  const edges: Edge[] = [];
  const unresolved: Violation[] = [];
  for (const [from, text] of files) {
    for (const site of importSites(from, text)) {
      const to = resolveSpecifier(from, site.specifier);
      if (to === undefined) continue;
      if (files.has(to)) {
        if (site.via === 'import') edges.push({ ...site, from, to });
      } else if (inChecked(to, files) && !to.endsWith('/')) {
        unresolved.push({
          kind: 'unresolved',
          file: from,
          line: site.line,
          specifier: site.specifier,
        });
      }
    }
  }
  return { edges, unresolved };
}

/** A path under one of the checked roots (src/, bin/) — one that should have been found. */
function inChecked(path: string, files: ReadonlyMap<string, string>): boolean {
  const root = path.split('/')[0];
  for (const f of files.keys()) if (f.split('/')[0] === root) return true;
  return false;
}

/** Strongly connected components with more than one file, or a file importing itself. */
export function cycles(files: Iterable<string>, edges: readonly Edge[]): string[][] {
  const next = new Map<string, string[]>();
  for (const f of files) next.set(f, []);
  for (const e of edges) next.get(e.from)?.push(e.to);
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  // Tarjan, iterative: src/ is a few hundred files but a deep chain should not hit the stack.
  for (const root of next.keys()) {
    if (index.has(root)) continue;
    const work: { node: string; i: number }[] = [{ node: root, i: 0 }];
    index.set(root, counter);
    low.set(root, counter++);
    stack.push(root);
    onStack.add(root);
    while (work.length > 0) {
      const top = work[work.length - 1]!;
      const targets = next.get(top.node)!;
      if (top.i < targets.length) {
        const to = targets[top.i++]!;
        if (!index.has(to)) {
          index.set(to, counter);
          low.set(to, counter++);
          stack.push(to);
          onStack.add(to);
          work.push({ node: to, i: 0 });
        } else if (onStack.has(to)) {
          low.set(top.node, Math.min(low.get(top.node)!, index.get(to)!));
        }
        continue;
      }
      work.pop();
      if (work.length > 0) {
        const parent = work[work.length - 1]!.node;
        low.set(parent, Math.min(low.get(parent)!, low.get(top.node)!));
      }
      if (low.get(top.node) === index.get(top.node)) {
        const component: string[] = [];
        let member: string;
        do {
          member = stack.pop()!;
          onStack.delete(member);
          component.push(member);
        } while (member !== top.node);
        const selfLoop = edges.some((e) => e.from === top.node && e.to === top.node);
        if (component.length > 1 || selfLoop) found.push(component.sort());
      }
    }
  }
  return found.sort((a, b) => a[0]!.localeCompare(b[0]!));
}

/** What is wrong with the table itself: a rank shared without `siblings`, a path held twice. */
function tableProblems(table: LayerTable): Violation[] {
  const out: Violation[] = [];
  const names = new Set<string>();
  const paths = new Map<string, string>();
  for (const layer of table) {
    if (names.has(layer.layer)) out.push({ kind: 'table', message: `layer ${layer.layer} twice` });
    names.add(layer.layer);
    const mates = table.filter((l) => l.rank === layer.rank && l !== layer);
    if (mates.length > 0 && !(layer.siblings && mates.every((m) => m.siblings))) {
      out.push({
        kind: 'table',
        message: `layer ${layer.layer} shares rank ${layer.rank} with ${mates.map((m) => m.layer).join(', ')}: mark them all siblings or give each its own rank`,
      });
    }
    for (const path of layer.paths) {
      const holder = paths.get(path);
      if (holder)
        out.push({ kind: 'table', message: `${path} is in ${holder} and ${layer.layer}` });
      paths.set(path, layer.layer);
    }
  }
  return out;
}

/** Every violation of the table's rules by the given files. */
export function checkLayers(options: CheckOptions): Violation[] {
  const { files, table, maxLines } = options;
  const entryPaths = options.entryPaths ?? ['src/cli/', 'bin/lib/'];
  const out: Violation[] = tableProblems(table);
  const src = [...files.keys()].filter((f) => f.startsWith('src/')).sort();

  for (const layer of table) {
    for (const path of layer.paths) {
      const used = src.some((f) => (path.endsWith('/') ? f.startsWith(path) : f === path));
      if (!used) out.push({ kind: 'table', message: `${path} (${layer.layer}) holds no file` });
    }
  }
  for (const file of src) if (!layerOf(table, file)) out.push({ kind: 'unplaced', file });

  const { edges, unresolved } = importEdges(files);
  out.push(...unresolved);
  for (const edge of edges) {
    if (edge.from.startsWith('bin/')) {
      if (!entryPaths.some((p) => edge.to.startsWith(p))) out.push({ kind: 'entry', edge });
      continue;
    }
    if (!edge.from.startsWith('src/') || !edge.to.startsWith('src/')) continue;
    const from = layerOf(table, edge.from);
    const to = layerOf(table, edge.to);
    if (!from || !to || from === to) continue;
    if (to.rank > from.rank) {
      out.push({ kind: 'upward', edge, fromLayer: from.layer, toLayer: to.layer });
    } else if (to.rank === from.rank) {
      out.push({ kind: 'sideways', edge, fromLayer: from.layer, toLayer: to.layer });
    }
  }
  for (const component of cycles(files.keys(), edges)) {
    const members = new Set(component);
    const inside = edges
      .filter((e) => members.has(e.from) && members.has(e.to))
      .sort((a, b) => a.from.localeCompare(b.from) || a.line - b.line);
    out.push({ kind: 'cycle', files: component, edges: inside });
  }
  for (const file of src) {
    const lines = lineCount(files.get(file)!);
    if (lines > maxLines) out.push({ kind: 'too-long', file, lines });
  }
  for (const file of src) {
    for (const site of reexportSites(file, files.get(file)!)) {
      out.push({ kind: 'reexport', file, ...site });
    }
  }
  return out;
}

/** Lines as `wc -l` counts them (a last line without a newline still counts). */
export function lineCount(text: string): number {
  if (text.length === 0) return 0;
  const newlines = text.split('\n').length - 1;
  return text.endsWith('\n') ? newlines : newlines + 1;
}

function site(edge: Edge): string {
  return `${edge.from}:${edge.line} → ${edge.to}${edge.typeOnly ? ' (type only)' : ''}`;
}

/** One line a violation (a cycle lists its edges under it), grouped by kind. */
export function formatViolations(violations: readonly Violation[]): string {
  const order: Violation['kind'][] = [
    'table',
    'unplaced',
    'unresolved',
    'entry',
    'upward',
    'sideways',
    'cycle',
    'reexport',
    'too-long',
  ];
  const heading: Record<Violation['kind'], string> = {
    table: 'the layer table itself',
    unplaced: 'files no row of the layer table covers (place them)',
    unresolved: 'relative imports of files that do not exist',
    entry: 'bin/ importing past its entry points (src/cli/, bin/lib/)',
    upward: 'upward imports (a layer importing one above it)',
    sideways: 'sideways imports (sibling layers importing each other)',
    cycle: 'file-level import cycles (type-only imports count)',
    reexport: 're-exports of what another module defines (import it from there)',
    'too-long': 'src modules over the line limit',
  };
  const lines: string[] = [];
  for (const kind of order) {
    const group = violations.filter((v) => v.kind === kind);
    if (group.length === 0) continue;
    lines.push(`${heading[kind]}: ${group.length}`);
    for (const v of group) {
      switch (v.kind) {
        case 'table':
          lines.push(`  ${v.message}`);
          break;
        case 'unplaced':
          lines.push(`  ${v.file}`);
          break;
        case 'unresolved':
          lines.push(`  ${v.file}:${v.line} '${v.specifier}'`);
          break;
        case 'entry':
          lines.push(`  ${site(v.edge)}`);
          break;
        case 'upward':
        case 'sideways':
          lines.push(`  ${site(v.edge)}   [${v.fromLayer} → ${v.toLayer}]`);
          break;
        case 'cycle':
          lines.push(`  ${v.files.join(' ⇄ ')}`);
          for (const e of v.edges) lines.push(`      ${site(e)}`);
          break;
        case 'too-long':
          lines.push(`  ${v.file}: ${v.lines} lines`);
          break;
        case 'reexport':
          lines.push(`  ${v.file}:${v.line} ${v.names.join(', ')}`);
          break;
      }
    }
  }
  return lines.join('\n');
}

/** The checked files of a checkout: every file under src/ and bin/, keyed by repository path. */
export function readCheckedFiles(root: string, dirs = ['src', 'bin']): Map<string, string> {
  const files = new Map<string, string>();
  const walk = (dir: string) => {
    for (const entry of readdirSync(posix.join(root, dir)).sort()) {
      const path = `${dir}/${entry}`;
      if (statSync(posix.join(root, path)).isDirectory()) walk(path);
      else files.set(path, readFileSync(posix.join(root, path), 'utf8'));
    }
  };
  for (const dir of dirs) walk(dir);
  return files;
}
