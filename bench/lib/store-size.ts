import pg from 'pg';

/**
 * The bytes the store's history tables take on disk: pg_total_relation_size of each (its
 * heap, TOAST, free-space and visibility maps, and every index), split into the table's
 * own bytes and its indexes'. A partitioned push_events is summed over every partition of
 * pg_partition_tree (its parent holds no rows; the function lists nothing for a plain
 * table, which is then taken alone). A table this schema lacks (push_keys before the
 * partitioned layout, push_commits once commits are inline, commits once it is the view of
 * stored_commits) is left out.
 */

export const STORE_TABLES = [
  'push_events',
  'push_keys',
  'push_commits',
  'commits',
  'stored_commits',
  'actors',
  'repositories',
] as const;

export interface TableSize {
  table: string;
  /** Heap and TOAST (with their maps). */
  table_bytes: number;
  index_bytes: number;
  total: number;
  partitions: number;
}

export async function storeSizes(url: string): Promise<TableSize[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const r = await client.query<{
      name: string;
      table_bytes: string;
      index_bytes: string;
      partitions: string;
    }>(
      `SELECT t.name,
         coalesce(sum(pg_table_size(p.relid)), 0) AS table_bytes,
         coalesce(sum(pg_indexes_size(p.relid)), 0) AS index_bytes,
         count(*) FILTER (WHERE p.isleaf AND p.level > 0) AS partitions
       FROM unnest($1::text[]) WITH ORDINALITY AS t(name, n)
       JOIN pg_class c ON c.oid = to_regclass('public.' || t.name) AND c.relkind IN ('r', 'p')
       CROSS JOIN LATERAL (
         SELECT relid, isleaf, level FROM pg_partition_tree(c.oid) WHERE c.relkind = 'p'
         UNION ALL
         SELECT c.oid, true, 0 WHERE c.relkind <> 'p'
       ) p
       GROUP BY t.name, t.n
       ORDER BY t.n`,
      [STORE_TABLES],
    );
    return r.rows.map((row) => {
      const table_bytes = Number(row.table_bytes);
      const index_bytes = Number(row.index_bytes);
      return {
        table: row.name,
        table_bytes,
        index_bytes,
        total: table_bytes + index_bytes,
        partitions: Number(row.partitions),
      };
    });
  } finally {
    await client.end();
  }
}

export const totalBytes = (sizes: TableSize[]) => sizes.reduce((a, s) => a + s.total, 0);

/** Pushes stored (a partitioned push_events counts every partition). */
export async function pushesStored(url: string): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const r = await client.query<{ n: string }>('SELECT count(*) AS n FROM push_events');
    return Number(r.rows[0]!.n);
  } finally {
    await client.end();
  }
}

/** VACUUM (ANALYZE) the store's tables: the state autovacuum leaves them in. */
export async function vacuumStore(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const t of STORE_TABLES) {
      const r = await client.query<{ c: string | null }>('SELECT to_regclass($1) AS c', [
        `public.${t}`,
      ]);
      if (r.rows[0]!.c) await client.query(`VACUUM (ANALYZE) ${t}`);
    }
  } finally {
    await client.end();
  }
}

/**
 * Each index of the store's tables, a partitioned index summed over its partitions' indexes
 * (named by its root in pg_partition_tree's sense: the index on the partitioned table).
 */
export async function indexSizes(url: string): Promise<Map<string, number>> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const r = await client.query<{ table_name: string; index_name: string; bytes: string }>(
      `SELECT t.name AS table_name, i.relname AS index_name,
         coalesce((SELECT sum(pg_relation_size(p.relid)) FROM pg_partition_tree(i.oid) p
                    WHERE p.isleaf), pg_relation_size(i.oid)) AS bytes
       FROM unnest($1::text[]) AS t(name)
       JOIN pg_class c ON c.oid = to_regclass('public.' || t.name) AND c.relkind IN ('r', 'p')
       JOIN pg_index x ON x.indrelid = c.oid
       JOIN pg_class i ON i.oid = x.indexrelid`,
      [STORE_TABLES],
    );
    return new Map(r.rows.map((row) => [`${row.table_name}.${row.index_name}`, Number(row.bytes)]));
  } finally {
    await client.end();
  }
}
