import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { withoutUserinfo } from '../platform/redact.ts';

/**
 * Where a month's hours were exported (ADR 0201): a directory on this machine (ARCHIVE_DIR,
 * or a file:// mirror), or an http(s) mirror. Read only: each file is read whole to measure
 * and hash it, never trusted from a listing or a flag. A mirror's user and password (a
 * userinfo in GHARCHIVE_URL) go in the request's Authorization header, never in a label.
 */
export interface ArchivePlace {
  /** What logs, status and history_months show: the directory, or the URL without userinfo. */
  label: string;
  /** The directory, for a local place (DuckDB reads a Parquet file there); else null. */
  dir: string | null;
  url: URL | null;
}

/** A directory path, a file:// URL or an http(s) URL → the place. */
export function archivePlace(where: string): ArchivePlace {
  if (/^https?:\/\//i.test(where)) {
    const url = new URL(`${where.replace(/\/+$/, '')}/`);
    return { label: withoutUserinfo(url.href.replace(/\/$/, '')), dir: null, url };
  }
  const dir = where.startsWith('file:') ? fileURLToPath(where) : path.resolve(where);
  return { label: dir, dir, url: null };
}

/** A local file of the place (`rel` is relative: `pushes/2015-01-01-0.parquet`), or null. */
export function localPath(place: ArchivePlace, rel: string): string | null {
  return place.dir === null ? null : path.join(place.dir, rel);
}

export interface Measured {
  bytes: number;
  sha256: string;
}

const FETCH_TIMEOUT_MS = 10 * 60_000;

async function get(place: ArchivePlace, rel: string): Promise<Response | null> {
  const url = new URL(rel, place.url!);
  const headers: Record<string, string> = {};
  if (url.username !== '' || url.password !== '') {
    const user = decodeURIComponent(url.username);
    const pass = decodeURIComponent(url.password);
    headers.authorization = `Basic ${Buffer.from(`${user}:${pass}`).toString('base64')}`;
    url.username = '';
    url.password = '';
  }
  const res = await fetch(url, { headers, signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) });
  if (res.status === 404) {
    await res.body?.cancel();
    return null;
  }
  if (!res.ok || !res.body) {
    await res.body?.cancel();
    throw new Error(`${withoutUserinfo(url.href)} answered HTTP ${res.status}`);
  }
  return res;
}

/** The file's bytes as a stream from its place, or null when the place has no such file. */
async function readStream(place: ArchivePlace, rel: string): Promise<AsyncIterable<Buffer> | null> {
  if (place.dir !== null) {
    // Opened once: the stream reads the handle that proved the file is there.
    const handle = await open(path.join(place.dir, rel)).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return null;
      throw err;
    });
    return handle === null ? null : handle.createReadStream();
  }
  const res = await get(place, rel);
  return res === null ? null : Readable.fromWeb(res.body as never);
}

/** The file's bytes and SHA-256, or null when the place has no such file. */
export async function measure(place: ArchivePlace, rel: string): Promise<Measured | null> {
  const stream = await readStream(place, rel);
  if (stream === null) return null;
  const hash = createHash('sha256');
  let bytes = 0;
  for await (const chunk of stream) {
    hash.update(chunk);
    bytes += chunk.length;
  }
  return { bytes, sha256: hash.digest('hex') };
}

/** A small file (a manifest) whole, at most `max` bytes; null when absent. */
export async function readSmall(
  place: ArchivePlace,
  rel: string,
  max: number,
): Promise<Buffer | null> {
  const chunks: Buffer[] = [];
  let bytes = 0;
  const stream = await readStream(place, rel);
  if (stream === null) return null;
  for await (const chunk of stream) {
    bytes += chunk.length;
    if (bytes > max) throw new Error(`${rel} is larger than ${max} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}
