import { chmod, chown, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { acquireEmbeddedPostgres, type EmbeddedHandle } from '../../src/platform/db/embedded.ts';
import { stopEmbedded } from '../../src/platform/db/embedded-admin.ts';
import { clusterPaths } from '../../src/platform/db/embedded-cluster.ts';
import {
  ensureSized,
  SIZING_MARKER,
  sizingFor,
  usableMemory,
} from '../../src/platform/db/embedded-sizing.ts';
import { createLogger } from '../../src/platform/log.ts';
import { sparePort } from '../support/embedded-env.ts';

/**
 * The embedded server is sized to the machine (ADR 0208): a block in its postgresql.conf,
 * written once, which ALTER SYSTEM overrides and a cluster made before gets at its next start.
 */

const GB = 1024 ** 3;

describe('sizingFor', () => {
  it('gives a quarter of memory to shared buffers, between 128 MB and 8 GB', () => {
    expect(sizingFor(24 * GB)).toMatchObject({
      shared_buffers: '6144MB',
      effective_cache_size: '18432MB',
      max_wal_size: '8GB',
    });
    expect(sizingFor(2 * GB)).toMatchObject({ shared_buffers: '512MB', max_wal_size: '4GB' });
    // What an "8 GB" machine reports.
    expect(sizingFor(7.7 * GB).max_wal_size).toBe('8GB');
    expect(sizingFor(256 * 1024 ** 2).shared_buffers).toBe('128MB');
    expect(sizingFor(256 * GB).shared_buffers).toBe('8192MB');
  });
});

let dataDir = '';
let port = 0;
const handles: EmbeddedHandle[] = [];
beforeAll(async () => {
  dataDir = await mkdtemp(path.join(os.tmpdir(), 'gpi-sizing-'));
  await chmod(dataDir, 0o755);
  port = await sparePort();
});
afterEach(async () => {
  for (const h of handles.splice(0)) await h.release().catch(() => {});
  await stopEmbedded(dataDir, true);
});
afterAll(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

async function acquire(events: Record<string, unknown>[]): Promise<EmbeddedHandle> {
  const logger = createLogger('debug', {
    write: (line: string) => events.push(JSON.parse(line)),
  });
  const handle = await acquireEmbeddedPostgres({ dataDir, port, role: 'test', logger });
  handles.push(handle);
  return handle;
}

async function setting(url: string, name: string): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const r = await client.query<{ bytes: string }>(
      'SELECT pg_size_bytes(current_setting($1)) AS bytes',
      [name],
    );
    return Number(r.rows[0]!.bytes);
  } finally {
    await client.end();
  }
}

async function alterSystem(url: string, statement: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(statement).finally(() => client.end());
}

const conf = () => path.join(clusterPaths(dataDir).cluster, 'postgresql.conf');
const mb = (value: string) => Number(value.replace(/MB$/, '')) * 1024 ** 2;

describe('the embedded server, sized', () => {
  it('a new cluster has the block from initdb; ALTER SYSTEM overrides it; a cluster without it gets it at its start', async () => {
    const expected = sizingFor(usableMemory());
    const events: Record<string, unknown>[] = [];
    let handle = await acquire(events);
    expect(await setting(handle.url, 'shared_buffers')).toBe(mb(expected.shared_buffers!));
    expect(await setting(handle.url, 'max_wal_size')).toBe(
      Number(expected.max_wal_size!.replace(/GB$/, '')) * GB,
    );
    // A new cluster is sized at initdb, and its init line says so.
    const init = events.filter((e) => e.event === 'db.embedded_init');
    expect(init).toHaveLength(1);
    expect(init[0]!.sized).toEqual(expected);
    expect(events.filter((e) => e.event === 'db.embedded_sized')).toHaveLength(0);

    // The operator's word wins over the block, across a restart, and the block is not
    // written again.
    await alterSystem(handle.url, "ALTER SYSTEM SET shared_buffers = '160MB'");
    await handle.release();
    handle = await acquire(events);
    expect(await setting(handle.url, 'shared_buffers')).toBe(160 * 1024 ** 2);
    expect(events.filter((e) => e.event === 'db.embedded_init')).toHaveLength(1);
    expect(events.filter((e) => e.event === 'db.embedded_sized')).toHaveLength(0);
    const text = await readFile(conf(), 'utf8');
    expect(text.split(SIZING_MARKER)).toHaveLength(2);

    // A cluster made before the block (its postgresql.conf without it) gets it at its next
    // start, and the server reads the file it left (owner and mode kept).
    await alterSystem(handle.url, 'ALTER SYSTEM RESET shared_buffers');
    await handle.release();
    await writeFile(conf(), text.slice(0, text.indexOf(`\n${SIZING_MARKER}`)));
    handle = await acquire(events);
    const sized = events.filter((e) => e.event === 'db.embedded_sized');
    expect(sized).toHaveLength(1);
    expect(sized[0]!.sized).toEqual(expected);
    expect(await setting(handle.url, 'shared_buffers')).toBe(mb(expected.shared_buffers!));
  });

  it('two starters at once leave one block, the file keeping its owner and mode', async () => {
    const cluster = await mkdtemp(path.join(os.tmpdir(), 'gpi-sizing-conf-'));
    const file = path.join(cluster, 'postgresql.conf');
    try {
      await writeFile(file, 'port = 5432\n');
      await chmod(file, 0o640);
      // As root, a file of another user's, as the server's postgresql.conf is.
      const owner = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : undefined;
      if (owner) await chown(file, owner.uid, owner.gid);
      const before = await stat(file);
      const written = await Promise.all([
        ensureSized(cluster, 4 * GB),
        ensureSized(cluster, 4 * GB),
      ]);
      expect(written[0] ?? written[1]).toEqual(sizingFor(4 * GB));
      const text = await readFile(file, 'utf8');
      expect(text.startsWith('port = 5432\n')).toBe(true);
      expect(text.split(SIZING_MARKER)).toHaveLength(2);
      expect(text).toContain("shared_buffers = '1024MB'");
      const after = await stat(file);
      expect([after.uid, after.gid, after.mode & 0o7777]).toEqual([before.uid, before.gid, 0o640]);
      if (owner) expect(after.uid).toBe(owner.uid);
      expect(await ensureSized(cluster, 4 * GB)).toBeNull();
      // Nothing left beside it.
      expect(await readdir(cluster)).toEqual(['postgresql.conf']);
    } finally {
      await rm(cluster, { recursive: true, force: true });
    }
  });
});
