import { describe, expect, it } from 'vitest';
import { ROOT } from '../support/cli.ts';
import {
  checkLayers,
  formatViolations,
  type LayerTable,
  readCheckedFiles,
} from '../support/layers.ts';

/**
 * The layers of src/, bottom to top. A module imports only from its own layer or one listed
 * before it; the pipelines share a rank and never import each other (they share through
 * store/ and work/). No file-level import cycle, type-only imports included; no src module
 * over 500 lines; no re-export of another module's names; bin/ imports only src/cli/ and
 * bin/lib/. A new file must sit under a path of this table. The rules, and their proof on a
 * tree in memory: test/support/layers.ts, test/unit/layers-checker.test.ts.
 */
const LAYERS: LayerTable = [
  // What any program would need: configuration, Postgres, bounded JSON, logs, errors.
  { layer: 'platform', rank: 0, paths: ['src/platform/'] },
  // HTTP to GitHub and reading its answers; no database.
  { layer: 'github', rank: 1, paths: ['src/github/'] },
  // Everything that spends a request: reservations, ledger, gates, pacing, the client.
  { layer: 'budget', rank: 2, paths: ['src/budget/'] },
  // The tables more than one pipeline writes or reads: pushes, commits, sources, gaps.
  { layer: 'store', rank: 3, paths: ['src/store/'] },
  // What enrichment and commit fetching share: deps, the fetch loop, the split, due probes.
  { layer: 'work', rank: 4, paths: ['src/work/'] },
  // The pipelines.
  { layer: 'poll', rank: 5, siblings: true, paths: ['src/poll/'] },
  { layer: 'enrichment', rank: 5, siblings: true, paths: ['src/enrichment/'] },
  { layer: 'commits', rank: 5, siblings: true, paths: ['src/commits/'] },
  { layer: 'backfill', rank: 5, siblings: true, paths: ['src/backfill/'] },
  { layer: 'export', rank: 5, siblings: true, paths: ['src/export/'] },
  // pg-boss, the handlers, the scheduler, the reconciler, retention.
  { layer: 'jobs', rank: 6, paths: ['src/jobs/'] },
  // The entry points and what only they use; app.ts is the composition root.
  {
    layer: 'surfaces',
    rank: 7,
    paths: ['src/cli/', 'src/web/', 'src/status/', 'src/webhooks/', 'src/app.ts'],
  },
];

const MAX_LINES = 500;

describe('the layers of src/', () => {
  const files = readCheckedFiles(ROOT);

  it('holds: no upward or sideways import, no cycle, no unplaced file, no module over 500 lines', () => {
    const violations = checkLayers({ files, table: LAYERS, maxLines: MAX_LINES });
    expect(formatViolations(violations), 'the layer table (test/unit/layers.test.ts)').toBe('');
  });

  it('would fail an upward import, a sideways one and a cycle added to this tree', () => {
    const broken = new Map(files);
    const add = (path: string, line: string) => {
      const text = broken.get(path);
      if (text === undefined) throw new Error(`${path} is not in the tree`);
      broken.set(path, `${line}\n${text}`);
    };
    add('src/platform/log.ts', "import '../jobs/boss.ts';");
    add('src/poll/poll-source.ts', "import '../commits/claim.ts';");
    const kinds = checkLayers({ files: broken, table: LAYERS, maxLines: MAX_LINES }).map((v) =>
      v.kind === 'upward' || v.kind === 'sideways' ? `${v.kind} ${v.edge.from}` : v.kind,
    );
    expect(kinds).toContain('upward src/platform/log.ts');
    expect(kinds).toContain('sideways src/poll/poll-source.ts');
    // jobs/boss.ts reaches platform/log.ts back, so the upward import also closes a cycle.
    expect(kinds).toContain('cycle');
  });
});
