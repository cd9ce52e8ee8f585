import { describe, expect, it } from 'vitest';
import {
  checkLayers,
  cycles,
  type Edge,
  formatViolations,
  importSites,
  type LayerTable,
  layerOf,
  lineCount,
  type Violation,
} from '../support/layers.ts';

/**
 * The layer checker (test/support/layers.ts) on a small tree held in memory: each rule is
 * shown firing on a deliberate break, and staying quiet on the same tree without it, so a
 * layer test built on the checker cannot pass by saying nothing.
 */

const TABLE: LayerTable = [
  { layer: 'platform', rank: 0, paths: ['src/platform/'] },
  { layer: 'store', rank: 1, paths: ['src/store/'] },
  { layer: 'poll', rank: 2, siblings: true, paths: ['src/poll/'] },
  { layer: 'enrich', rank: 2, siblings: true, paths: ['src/enrich/'] },
  { layer: 'surfaces', rank: 3, paths: ['src/cli/', 'src/app.ts'] },
];

/** A tree that keeps every rule: each test adds one break to it. */
function cleanTree(): Map<string, string> {
  return new Map([
    ['src/platform/log.ts', 'export const log = 1;\n'],
    ['src/platform/db.ts', "import { log } from './log.ts';\nexport const db = log;\n"],
    ['src/store/pushes.ts', "import { db } from '../platform/db.ts';\nexport const p = db;\n"],
    ['src/poll/poll.ts', "import { p } from '../store/pushes.ts';\nexport const poll = p;\n"],
    ['src/enrich/enrich.ts', "import type { p } from '../store/pushes.ts';\nexport const e = 1;\n"],
    [
      'src/app.ts',
      "import { poll } from './poll/poll.ts';\nimport { e } from './enrich/enrich.ts';\nexport const app = [poll, e];\n",
    ],
    ['src/cli/start.ts', "import { poll } from '../app.ts';\nexport const start = poll;\n"],
    ['bin/start', "import { launch } from './lib/entry.mjs';\nawait launch('start');\n"],
    [
      'bin/lib/entry.mjs',
      "export async function launch(n) { await import('../../src/cli/start.ts'); }\n",
    ],
  ]);
}

function check(files: Map<string, string>, maxLines = 20): Violation[] {
  return checkLayers({ files, table: TABLE, maxLines });
}

function kinds(violations: Violation[]): string[] {
  return violations.map((v) => v.kind);
}

describe('importSites', () => {
  it('reads every literal specifier, says which are type-only, and skips comments and strings', () => {
    const text = [
      "import a from './a.ts';",
      "import type { B } from './b.ts';",
      "import { type C, type D } from './c.ts';",
      "import { type E, f } from './e.ts';",
      "import './side-effect.ts';",
      "export { g } from './g.ts';",
      "export type { H } from './h.ts';",
      "export * from './star.ts';",
      "const m = await import('./dynamic.ts');",
      "type T = import('./type-import.ts').T;",
      "const w = new URL('./child.ts', import.meta.url);",
      "// import { no } from './commented.ts';",
      'const s = "import { no } from \'./in-a-string.ts\'";',
      "const dyn = await import('./' + name + '.ts');",
      "import pg from 'pg';",
    ].join('\n');
    expect(importSites('src/x/file.ts', text)).toEqual([
      { specifier: './a.ts', line: 1, typeOnly: false, via: 'import' },
      { specifier: './b.ts', line: 2, typeOnly: true, via: 'import' },
      { specifier: './c.ts', line: 3, typeOnly: true, via: 'import' },
      { specifier: './e.ts', line: 4, typeOnly: false, via: 'import' },
      { specifier: './side-effect.ts', line: 5, typeOnly: false, via: 'import' },
      { specifier: './g.ts', line: 6, typeOnly: false, via: 'import' },
      { specifier: './h.ts', line: 7, typeOnly: true, via: 'import' },
      { specifier: './star.ts', line: 8, typeOnly: false, via: 'import' },
      { specifier: './dynamic.ts', line: 9, typeOnly: false, via: 'import' },
      { specifier: './type-import.ts', line: 10, typeOnly: true, via: 'import' },
      { specifier: './child.ts', line: 11, typeOnly: false, via: 'url' },
      { specifier: 'pg', line: 15, typeOnly: false, via: 'import' },
    ]);
  });

  it('reads an executable without an extension as JavaScript', () => {
    expect(importSites('bin/start', "import { launch } from './lib/entry.mjs';\n")).toEqual([
      { specifier: './lib/entry.mjs', line: 1, typeOnly: false, via: 'import' },
    ]);
  });
});

describe('layerOf', () => {
  it('places a file by the longest path that covers it, a file path beating its folder', () => {
    const table: LayerTable = [
      { layer: 'low', rank: 0, paths: ['src/'] },
      { layer: 'high', rank: 1, paths: ['src/app.ts', 'src/cli/'] },
    ];
    expect(layerOf(table, 'src/app.ts')?.layer).toBe('high');
    expect(layerOf(table, 'src/cli/x.ts')?.layer).toBe('high');
    expect(layerOf(table, 'src/platform/log.ts')?.layer).toBe('low');
    expect(layerOf(table, 'src/application.ts')?.layer).toBe('low');
    expect(layerOf(TABLE, 'lib/other.ts')).toBeUndefined();
  });
});

describe('checkLayers', () => {
  it('finds nothing wrong with a tree that keeps every rule', () => {
    expect(check(cleanTree())).toEqual([]);
  });

  it('fails an upward import, naming the importer, its line and both layers', () => {
    const files = cleanTree();
    files.set(
      'src/store/pushes.ts',
      "import { db } from '../platform/db.ts';\nimport { poll } from '../poll/poll.ts';\nexport const p = db;\n",
    );
    const violations = check(files);
    const upward = violations.filter((v) => v.kind === 'upward');
    expect(upward).toEqual([
      {
        kind: 'upward',
        edge: {
          from: 'src/store/pushes.ts',
          to: 'src/poll/poll.ts',
          specifier: '../poll/poll.ts',
          line: 2,
          typeOnly: false,
          via: 'import',
        },
        fromLayer: 'store',
        toLayer: 'poll',
      },
    ]);
    expect(formatViolations(violations)).toContain(
      'src/store/pushes.ts:2 → src/poll/poll.ts   [store → poll]',
    );
  });

  it('fails an upward import that is only a type', () => {
    const files = cleanTree();
    files.set(
      'src/platform/log.ts',
      "import type { p } from '../store/pushes.ts';\nexport const log = 1;\n",
    );
    const upward = check(files).filter((v) => v.kind === 'upward');
    expect(upward.map((v) => v.kind === 'upward' && [v.edge.from, v.edge.typeOnly])).toEqual([
      ['src/platform/log.ts', true],
    ]);
  });

  it('fails a sideways import between sibling pipelines, in either direction', () => {
    const files = cleanTree();
    files.set(
      'src/poll/poll.ts',
      "import { p } from '../store/pushes.ts';\nimport { e } from '../enrich/enrich.ts';\nexport const poll = p + e;\n",
    );
    const violations = check(files);
    expect(kinds(violations)).toEqual(['sideways']);
    const [v] = violations;
    expect(v?.kind === 'sideways' && [v.edge.from, v.edge.to, v.fromLayer, v.toLayer]).toEqual([
      'src/poll/poll.ts',
      'src/enrich/enrich.ts',
      'poll',
      'enrich',
    ]);
  });

  it('fails a file-level cycle inside one layer, listing its files and every edge of it', () => {
    const files = cleanTree();
    files.set('src/store/a.ts', "import { b } from './b.ts';\nexport const a = 1;\n");
    files.set('src/store/b.ts', "import { c } from './c.ts';\nexport const b = 1;\n");
    // Type-only on the closing edge: still a cycle in reading order.
    files.set('src/store/c.ts', "import type { a } from './a.ts';\nexport const c = 1;\n");
    const violations = check(files);
    expect(kinds(violations)).toEqual(['cycle']);
    const [v] = violations;
    expect(v?.kind === 'cycle' && v.files).toEqual([
      'src/store/a.ts',
      'src/store/b.ts',
      'src/store/c.ts',
    ]);
    expect(v?.kind === 'cycle' && v.edges.map((e) => `${e.from}>${e.to}`).sort()).toEqual([
      'src/store/a.ts>src/store/b.ts',
      'src/store/b.ts>src/store/c.ts',
      'src/store/c.ts>src/store/a.ts',
    ]);
    expect(formatViolations(violations)).toContain('src/store/c.ts:1 → src/store/a.ts (type only)');
  });

  it('fails a file that imports itself', () => {
    const files = cleanTree();
    files.set('src/store/self.ts', "import './self.ts';\nexport const y = 1;\n");
    expect(kinds(check(files))).toEqual(['cycle']);
  });

  it('fails a file no row of the table covers, so a new folder must be placed', () => {
    const files = cleanTree();
    files.set('src/misc/new.ts', 'export const n = 1;\n');
    files.set('src/loose.ts', 'export const l = 1;\n');
    expect(check(files).filter((v) => v.kind === 'unplaced')).toEqual([
      { kind: 'unplaced', file: 'src/loose.ts' },
      { kind: 'unplaced', file: 'src/misc/new.ts' },
    ]);
  });

  it('fails a src module over the line limit, and not one at it', () => {
    const files = cleanTree();
    files.set('src/store/at-limit.ts', 'x;\n'.repeat(20));
    files.set('src/store/long.ts', 'x;\n'.repeat(21));
    expect(check(files, 20)).toEqual([{ kind: 'too-long', file: 'src/store/long.ts', lines: 21 }]);
  });

  it('fails a re-export of what another module defines, and not an export of its own', () => {
    const files = cleanTree();
    files.set(
      'src/store/shim.ts',
      [
        "import { db } from '../platform/db.ts';",
        "import { log as logged } from '../platform/log.ts';",
        "export { p } from './pushes.ts';",
        "export * from './pushes.ts';",
        'export { db, logged as log };',
        "import type { Kysely } from 'kysely';",
        'export type { Kysely };',
        "export { sql } from 'kysely';",
        'const own = 1;',
        'export { own };',
        '',
      ].join('\n'),
    );
    expect(check(files)).toEqual([
      { kind: 'reexport', file: 'src/store/shim.ts', line: 3, names: ['p'] },
      { kind: 'reexport', file: 'src/store/shim.ts', line: 4, names: ['*'] },
      { kind: 'reexport', file: 'src/store/shim.ts', line: 5, names: ['db', 'log'] },
    ]);
  });

  it('fails bin/ importing past its entry points', () => {
    const files = cleanTree();
    files.set('bin/worker', "import { p } from '../src/store/pushes.ts';\n");
    const violations = check(files);
    expect(kinds(violations)).toEqual(['entry']);
    expect(formatViolations(violations)).toContain('bin/worker:1 → src/store/pushes.ts');
  });

  it('fails a relative import of a file that does not exist (a move that missed a path)', () => {
    const files = cleanTree();
    files.set(
      'src/poll/poll.ts',
      "import { p } from '../ingestion/store.ts';\nexport const poll = p;\n",
    );
    expect(check(files)).toEqual([
      { kind: 'unresolved', file: 'src/poll/poll.ts', line: 1, specifier: '../ingestion/store.ts' },
    ]);
  });

  it('checks that a new URL(…, import.meta.url) names a file, and counts it as no import', () => {
    const files = cleanTree();
    // A pipeline forking an entry point above it, which imports the pipeline back: a process
    // started from a file, not a module loaded, so neither upward nor a cycle.
    files.set(
      'src/poll/poll.ts',
      "import { p } from '../store/pushes.ts';\nfork(new URL('../cli/child.ts', import.meta.url));\nexport const poll = p;\n",
    );
    files.set(
      'src/cli/child.ts',
      "import { poll } from '../poll/poll.ts';\nexport const c = poll;\n",
    );
    expect(check(files)).toEqual([]);
    files.set('src/poll/poll.ts', "fork(new URL('./gone.ts', import.meta.url));\n");
    expect(check(files)).toEqual([
      { kind: 'unresolved', file: 'src/poll/poll.ts', line: 1, specifier: './gone.ts' },
    ]);
  });

  it('fails a table whose layers share a rank without being siblings, or that holds no file', () => {
    const table: LayerTable = [
      ...TABLE.filter((l) => l.layer !== 'store'),
      { layer: 'store', rank: 1, paths: ['src/store/'] },
      { layer: 'budget', rank: 1, paths: ['src/budget/'] },
    ];
    const violations = checkLayers({ files: cleanTree(), table, maxLines: 20 });
    expect(
      violations.filter((v) => v.kind === 'table').map((v) => v.kind === 'table' && v.message),
    ).toEqual([
      'layer store shares rank 1 with budget: mark them all siblings or give each its own rank',
      'layer budget shares rank 1 with store: mark them all siblings or give each its own rank',
      'src/budget/ (budget) holds no file',
    ]);
  });

  it('lists every kind under its own heading with a count', () => {
    const files = cleanTree();
    files.set(
      'src/platform/log.ts',
      "import { p } from '../store/pushes.ts';\nexport const log = 1;\n",
    );
    files.set('src/misc/new.ts', 'export const n = 1;\n');
    const text = formatViolations(check(files));
    expect(text.split('\n')).toEqual([
      'files no row of the layer table covers (place them): 1',
      '  src/misc/new.ts',
      'upward imports (a layer importing one above it): 1',
      '  src/platform/log.ts:1 → src/store/pushes.ts   [platform → store]',
      'file-level import cycles (type-only imports count): 1',
      '  src/platform/db.ts ⇄ src/platform/log.ts ⇄ src/store/pushes.ts',
      '      src/platform/db.ts:1 → src/platform/log.ts',
      '      src/platform/log.ts:1 → src/store/pushes.ts',
      '      src/store/pushes.ts:1 → src/platform/db.ts',
    ]);
  });
});

describe('cycles', () => {
  it('finds each strongly connected component once, on a chain too deep for recursion', () => {
    const n = 20_000;
    const files = Array.from({ length: n }, (_, i) => `src/m/f${i}.ts`);
    const edges: Edge[] = files.map((from, i) => ({
      from,
      to: files[(i + 1) % n]!,
      specifier: `./f${(i + 1) % n}.ts`,
      line: 1,
      typeOnly: false,
      via: 'import',
    }));
    const found = cycles(files, edges);
    expect(found).toHaveLength(1);
    expect(found[0]).toHaveLength(n);
  });
});

describe('lineCount', () => {
  it('counts lines as wc -l does, and a last line without a newline', () => {
    expect(lineCount('')).toBe(0);
    expect(lineCount('a\n')).toBe(1);
    expect(lineCount('a\nb')).toBe(2);
    expect(lineCount('a\nb\n')).toBe(2);
  });
});
