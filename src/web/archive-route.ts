import { createHash } from 'node:crypto';
import type http from 'node:http';
import { pipeline } from 'node:stream/promises';
import { type ArchiveAnswer, ArchiveCache, type ArchivePart, matches } from '../export/cache.ts';
import { servedManifest } from '../export/hour-export.ts';
import { archiveIndex } from '../export/hours-index.ts';
import { openGaps } from '../export/manifest.ts';
import { inHourSnapshot } from '../export/write.ts';
import { systemClock } from '../platform/clock.ts';
import type { Db } from '../platform/db/pool.ts';
import { DEFAULT_COVERAGE_HOURS, MAX_COVERAGE_HOURS } from '../status/coverage.ts';
import { type ArchiveHour, hourEnd, parseHour } from '../store/archive-hours.ts';
import {
  HOUR_OPEN_HEADER,
  IMPORTING_RETRY_AFTER_SECONDS,
  type OpenReason,
} from '../store/open-hours.ts';
import { ArchiveBusy, type ArchiveGate, createArchiveGate, DEFAULT_GATE } from './archive-gate.ts';
import { sendJson, type WebDeps } from './respond.ts';

/**
 * GET /archive/ and GET /archive/YYYY-MM-DD-H.json.gz (ADR 0130), and an hour's Parquet
 * tables and manifest (pushes/…parquet, push_commits/…parquet, …manifest.json, built by
 * src/export/hour-export.ts): the store as a GH
 * Archive mirror, so another instance can name this one in GHARCHIVE_URL. An hour's file is
 * the same bytes bin/export writes, from a cache keyed by the hour's state
 * (src/export/cache.ts) and streamed from disk: a 1,000,000-push hour costs the server its
 * read buffers, not the file. Only a name matching GH Archive's exactly is an hour (the path
 * never reaches the file system: the cache names its files itself); an hour not over yet,
 * or one the store knows nothing of, is a 404 as on data.gharchive.org.
 *
 * Every answer about an hour says whether it is final: `Archive-Hour-Open` lists why it is
 * not (src/store/open-hours.ts), and an hour an import is writing into is a 503 with
 * Retry-After. /archive reads the database through its own pool and gate (a bounded share
 * of bin/web's connections, src/web/pools.ts): past them it answers 503 with Retry-After,
 * and webhook intake, on a pool of its own, never waits for it.
 */

/** The wildcard key the router (src/web/server.ts) files the hour files under. */
export const ARCHIVE_FILES = '/archive/*';

const HOUR_NAME = '(\\d{4}-\\d{2}-\\d{2}-\\d{1,2})';

/** Each file an hour has under /archive/: its path, and what the cache is asked for. */
const FILES: readonly {
  path: RegExp;
  part: ArchivePart;
  named: (hour: string) => string;
  type: string;
}[] = [
  {
    path: new RegExp(`^/archive/${HOUR_NAME}\\.json\\.gz$`),
    part: 'json',
    named: (h) => `/archive/${h}.json.gz`,
    type: 'application/gzip',
  },
  {
    path: new RegExp(`^/archive/pushes/${HOUR_NAME}\\.parquet$`),
    part: 'pushes',
    named: (h) => `/archive/pushes/${h}.parquet`,
    type: 'application/vnd.apache.parquet',
  },
  {
    path: new RegExp(`^/archive/push_commits/${HOUR_NAME}\\.parquet$`),
    part: 'push_commits',
    named: (h) => `/archive/push_commits/${h}.parquet`,
    type: 'application/vnd.apache.parquet',
  },
  {
    path: new RegExp(`^/archive/${HOUR_NAME}\\.manifest\\.json$`),
    part: 'parts',
    named: (h) => `/archive/${h}.manifest.json`,
    type: 'application/json',
  },
];

type Handler = (req: http.IncomingMessage, res: http.ServerResponse) => Promise<void>;

function header(req: http.IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v.join(', ') : v;
}

function openHeader(reasons: OpenReason[]): Record<string, string> {
  return reasons.length > 0 ? { [HOUR_OPEN_HEADER]: reasons.join(', ') } : {};
}

function busy(res: http.ServerResponse, err: ArchiveBusy): void {
  res.setHeader('retry-after', String(err.retryAfterSeconds));
  sendJson(res, 503, { error: `${err.message}; retry later` });
}

export interface ArchiveRouteOptions {
  /** The archive's own database pool (default: the server's). */
  db?: Db;
  /** Its gate; default one of DEFAULT_GATE with `slots` requests at once. */
  gate?: ArchiveGate;
  slots?: number;
}

export function archiveRoutes(
  deps: WebDeps,
  o: ArchiveRouteOptions = {},
): { index: Handler; file: Handler; gate: ArchiveGate } {
  const db = o.db ?? deps.db;
  const gate = o.gate ?? createArchiveGate({ slots: o.slots ?? 2, ...DEFAULT_GATE });
  const cache = new ArchiveCache({
    db,
    logger: deps.logger,
    dataDir: deps.config.dataDir,
    withSlot: (fn) => gate.withSlot(fn),
    waitFor: (p) => gate.waitFor(p),
  });
  const now = () => (deps.clock ?? systemClock).now();

  const index: Handler = async (req, res) => {
    const raw = new URL(req.url ?? '/', 'http://localhost').searchParams.get('hours');
    const hours = raw === null ? DEFAULT_COVERAGE_HOURS : Number(raw);
    if (!/^\d+$/.test(raw ?? '1') || hours < 1 || hours > MAX_COVERAGE_HOURS) {
      sendJson(res, 400, { error: `hours must be an integer from 1 to ${MAX_COVERAGE_HOURS}` });
      return;
    }
    try {
      sendJson(res, 200, await gate.withSlot(() => archiveIndex(db, now(), hours)));
    } catch (err) {
      if (!(err instanceof ArchiveBusy)) throw err;
      busy(res, err);
    }
  };

  /**
   * The manifest: the parts of the hour's tables build and the gaps open now, in one
   * snapshot of the archive's pool; its ETag is its SHA-256, like a file's.
   */
  async function manifest(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    hour: ArchiveHour,
    answer: Extract<ArchiveAnswer, { kind: 'file' }>,
  ): Promise<void> {
    let parts: string;
    try {
      parts = (await answer.handle.readFile()).toString('utf8');
    } finally {
      await answer.handle.close().catch(() => {});
    }
    const gaps = await gate.withSlot(() => inHourSnapshot(db, (run) => openGaps(run, hour)));
    const body = Buffer.from(servedManifest(hour, parts, gaps));
    const etag = `"${createHash('sha256').update(body).digest('hex').slice(0, 40)}"`;
    const headers = { etag, 'cache-control': 'no-cache', ...openHeader(answer.reasons) };
    if (matches(header(req, 'if-none-match'), etag)) {
      res.writeHead(304, headers);
      res.end();
      return;
    }
    res.writeHead(200, {
      'content-type': 'application/json',
      'content-length': body.length,
      ...headers,
    });
    res.end(req.method === 'HEAD' ? undefined : body);
  }

  const file: Handler = async (req, res) => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    let kind: (typeof FILES)[number] | undefined;
    let name: string | undefined;
    for (const f of FILES) {
      name = f.path.exec(path)?.[1];
      if (name) {
        kind = f;
        break;
      }
    }
    const hour = name ? parseHour(name) : null;
    const at = now();
    // One rule for a zero-padded hour everywhere (bin/export, bin/backfill, here): it is
    // that hour. Its file has GH Archive's name (2026-01-01-5, never -05): sent there.
    if (hour && kind && hour.name !== name) {
      res.writeHead(301, { location: kind.named(hour.name) });
      res.end();
      return;
    }
    // Only hours that are over.
    if (!hour || !kind || hourEnd(hour) > at) {
      sendJson(res, 404, { error: 'not found' });
      return;
    }
    // A manifest's ETag is its own (it holds the gaps open now), not its build's.
    const ifNoneMatch = kind.part === 'parts' ? undefined : header(req, 'if-none-match');
    let answer: ArchiveAnswer;
    try {
      answer = await cache.answer(hour, at, ifNoneMatch, kind.part);
      if (answer.kind === 'file' && kind.part === 'parts') {
        return await manifest(req, res, hour, answer);
      }
    } catch (err) {
      if (!(err instanceof ArchiveBusy)) throw err;
      return busy(res, err);
    }
    if (answer.kind === 'unknown') {
      sendJson(res, 404, { error: `the store holds nothing of hour ${hour.name}` });
      return;
    }
    if (answer.kind === 'importing') {
      res.setHeader('retry-after', String(IMPORTING_RETRY_AFTER_SECONDS));
      res.setHeader(HOUR_OPEN_HEADER, answer.reasons.join(', '));
      sendJson(res, 503, {
        error: `hour ${hour.name} is being imported: its file is not final yet; retry later`,
        open: answer.reasons,
      });
      return;
    }
    if (answer.kind === 'not_modified' || matches(ifNoneMatch, answer.etag)) {
      if (answer.kind === 'file') await answer.handle.close();
      res.writeHead(304, {
        etag: answer.etag,
        'cache-control': 'no-cache',
        ...openHeader(answer.reasons),
      });
      res.end();
      return;
    }
    const { handle } = answer;
    try {
      res.writeHead(200, {
        'content-type': kind.type,
        'content-length': answer.bytes,
        etag: answer.etag,
        // The hour may still change (a gap filled, commits fetched): revalidate each time.
        'cache-control': 'no-cache',
        ...openHeader(answer.reasons),
      });
      if (req.method === 'HEAD') {
        res.end();
        return;
      }
      await pipeline(
        handle.createReadStream({ highWaterMark: 256 * 1024, autoClose: false }),
        res,
      ).catch((err: unknown) => {
        // The client went away mid-file: nothing failed on our side.
        if (!res.writableFinished && res.destroyed) return;
        throw err;
      });
    } finally {
      await handle.close().catch(() => {});
    }
  };

  return { index, file, gate };
}
