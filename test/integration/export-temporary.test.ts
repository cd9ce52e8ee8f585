import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import os, { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Child, killAll, spawnBin } from '../recovery/world.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { buildExportWorld, type ExportWorld } from '../support/export-world.ts';
import { waitFor } from '../support/wait.ts';

/**
 * A killed bin/export leaves no temporary file behind for good (ADR 0185). Each
 * export writes `<hour>.json.gz.<pid>.<time>.<host>.tmp` and renames it; a SIGKILL between
 * the two leaves it. The next export into the same directory removes those of dead writers
 * on this host — and leaves a running export's file alone, and another host's unless it is
 * a day old.
 *
 * Each export is killed while its temporary file exists: a test transaction holds commits
 * (which only the hour's cursor reads), so the cursor waits on it with the file open (a
 * signal, not a race).
 */

const t = useTestDatabase();
let w: ExportWorld;
let out: string;
const children: Child[] = [];
const HOST = createHash('sha256').update(os.hostname()).digest('hex').slice(0, 8);

beforeAll(async () => {
  w = await buildExportWorld(t);
  out = mkdtempSync(path.join(tmpdir(), 'gpi-export-tmp-'));
});
afterAll(async () => {
  await killAll(children);
  rmSync(out, { recursive: true, force: true });
});

const temporary = () => readdirSync(out).filter((n) => n.endsWith('.tmp'));

describe('bin/export killed mid-write', () => {
  it('leaves files the next export into the directory removes, and never a live export’s', async () => {
    const hold = await t.pool.connect();
    try {
      await hold.query('BEGIN');
      await hold.query('LOCK TABLE commits IN ACCESS EXCLUSIVE MODE');
      for (let i = 0; i < 3; i++) {
        const child = spawnBin('export', { DATABASE_URL: t.url }, [w.pushHour.name, '--out', out]);
        children.push(child);
        const mine = `.json.gz.${child.process.pid}.`;
        await waitFor(() => temporary().some((n) => n.includes(mine)), {
          what: `export ${i + 1}'s temporary file`,
          timeoutMs: 60_000,
        });
        // The one before it, killed, was removed when this one started.
        expect(temporary()).toHaveLength(1);
        child.process.kill('SIGKILL');
        expect((await child.exited).signal).toBe('SIGKILL');
      }
    } finally {
      await hold.query('ROLLBACK');
      hold.release();
    }
    const killed = temporary();
    expect(killed).toHaveLength(1);
    expect(killed[0]).toMatch(
      new RegExp(`^${w.pushHour.name}\\.json\\.gz\\.\\d+\\.[0-9a-z]+\\.${HOST}\\.tmp$`),
    );

    // A running export's file (this test process is alive), another host's fresh one, and
    // another host's a day and more old; and a file that only looks similar.
    const file = `${w.pushHour.name}.json.gz`;
    const live = `${file}.${process.pid}.zz1.${HOST}.tmp`;
    const foreignFresh = `${file}.4242.zz2.0badf00d.tmp`;
    const foreignStale = `${file}.4243.zz3.0badf00d.tmp`;
    const unrelated = 'notes.tmp';
    for (const name of [live, foreignFresh, foreignStale, unrelated]) {
      writeFileSync(path.join(out, name), 'x'.repeat(1000));
    }
    const twoDaysAgo = new Date(Date.now() - 48 * 3_600_000);
    utimesSync(path.join(out, foreignStale), twoDaysAgo, twoDaysAgo);

    const r = await runBin('export', [w.pushHour.name, '--out', out], { DATABASE_URL: t.url });
    expect(r.code, r.err).toBe(0);
    expect(r.err).toContain('removed 2 temporary files');
    expect(existsSync(path.join(out, file))).toBe(true);
    expect(temporary().sort()).toEqual([foreignFresh, live, unrelated].sort());
  });
});
