import type pg from 'pg';

/**
 * COPY … FROM STDIN with node-postgres alone (no pg-copy-streams in this project): a
 * "submittable" query that answers the server's CopyInResponse with the given chunks.
 * The bulk store stages archive chunks with it (src/store/pushes.ts), and it is
 * the physical ceiling the ingest and backfill benchmarks compare against.
 */

interface CopyConnection {
  sendCopyFromChunk(chunk: Buffer): void;
  endCopyFrom(): void;
}

class CopyFrom {
  readonly text: string;
  readonly chunks: Buffer[];
  readonly done: Promise<number>;
  callback?: unknown;
  private resolve!: (rows: number) => void;
  private reject!: (err: Error) => void;
  private rows = 0;
  private error: Error | null = null;

  constructor(text: string, chunks: Buffer[]) {
    this.text = text;
    this.chunks = chunks;
    this.done = new Promise((res, rej) => {
      this.resolve = res;
      this.reject = rej;
    });
  }

  submit(connection: { query(text: string): void }): void {
    connection.query(this.text);
  }

  handleCopyInResponse(connection: CopyConnection): void {
    for (const chunk of this.chunks) connection.sendCopyFromChunk(chunk);
    connection.endCopyFrom();
  }

  handleCommandComplete(msg: { text: string }): void {
    this.rows = Number(/(\d+)$/.exec(msg.text)?.[1] ?? 0);
  }

  // pg hands a server error (or a lost connection) to handleError and then forgets the
  // query: ReadyForQuery is never delivered to it, so the promise settles here.
  handleError(err: Error): void {
    this.error = err;
    this.reject(err);
  }

  handleReadyForQuery(): void {
    if (this.error) this.reject(this.error);
    else this.resolve(this.rows);
  }

  handleRowDescription(): void {}
  handleDataRow(): void {}
  handleEmptyQuery(): void {}
  handlePortalSuspended(): void {}
  handleCopyData(): void {}
}

const NEEDS_ESCAPE = /[\\\t\n\r]/;

/** Escapes one value for COPY's text format (\N is NULL). */
export function copyField(v: unknown): string {
  if (v === null || v === undefined) return '\\N';
  const s = v instanceof Date ? v.toISOString() : String(v);
  // Most fields need no escaping; testing first saves a replace per field on the bulk path.
  if (!NEEDS_ESCAPE.test(s)) return s;
  return s.replace(/[\\\t\n\r]/g, (c) =>
    c === '\\' ? '\\\\' : c === '\t' ? '\\t' : c === '\n' ? '\\n' : '\\r',
  );
}

/** Lines of tab-separated fields, packed into ~64 KiB chunks. */
export function copyChunks(rows: unknown[][]): Buffer[] {
  const chunks: Buffer[] = [];
  let lines: string[] = [];
  let size = 0;
  for (const row of rows) {
    const line = `${row.map(copyField).join('\t')}\n`;
    lines.push(line);
    size += line.length;
    if (size >= 65_536) {
      chunks.push(Buffer.from(lines.join('')));
      lines = [];
      size = 0;
    }
  }
  if (lines.length) chunks.push(Buffer.from(lines.join('')));
  return chunks;
}

/** Runs `COPY table (columns) FROM STDIN` with the chunks; resolves to the rows copied. */
export async function copyFrom(
  client: pg.ClientBase,
  statement: string,
  chunks: Buffer[],
): Promise<number> {
  const q = new CopyFrom(statement, chunks);
  // pg treats any object with submit() as a query it drives through its protocol events.
  (client as unknown as { query(q: CopyFrom): unknown }).query(q);
  return q.done;
}
