import type http from 'node:http';
import { pipeline } from 'node:stream/promises';
import { ArchiveCache, matches } from '../export/cache.ts';
import { archiveIndex } from '../export/hours-index.ts';
import { systemClock } from '../platform/clock.ts';
import type { Db } from '../platform/db/pool.ts';
import { DEFAULT_COVERAGE_HOURS, MAX_COVERAGE_HOURS } from '../status/coverage.ts';
import { hourEnd, parseHour } from '../store/archive-hours.ts';
import {
  HOUR_OPEN_HEADER,
  IMPORTING_RETRY_AFTER_SECONDS,
  type OpenReason,
} from '../store/open-hours.ts';
import { ArchiveBusy, type ArchiveGate, createArchiveGate, DEFAULT_GATE } from './archive-gate.ts';
import { sendJson, type WebDeps } from './respond.ts';

/**
 * GET /archive/ and GET /archive/YYYY-MM-DD-H.json.gz (ADR 0130): the store as a GH
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

const FILE_PATH = /^\/archive\/(\d{4}-\d{2}-\d{2}-\d{1,2})\.json\.gz$/;

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

  const file: Handler = async (req, res) => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    const name = FILE_PATH.exec(path)?.[1];
    const hour = name ? parseHour(name) : null;
    const at = now();
    // One rule for a zero-padded hour everywhere (bin/export, bin/backfill, here): it is
    // that hour. Its file has GH Archive's name (2026-01-01-5, never -05): sent there.
    if (hour && hour.name !== name) {
      res.writeHead(301, { location: `/archive/${hour.name}.json.gz` });
      res.end();
      return;
    }
    // Only hours that are over.
    if (!hour || hourEnd(hour) > at) {
      sendJson(res, 404, { error: 'not found' });
      return;
    }
    const ifNoneMatch = header(req, 'if-none-match');
    let answer: Awaited<ReturnType<ArchiveCache['answer']>>;
    try {
      answer = await cache.answer(hour, at, ifNoneMatch);
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
        'content-type': 'application/gzip',
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
