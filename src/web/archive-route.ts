import type http from 'node:http';
import { pipeline } from 'node:stream/promises';
import { systemClock } from '../clock.ts';
import { ArchiveCache, matches } from '../export/cache.ts';
import { archiveIndex } from '../export/hours-index.ts';
import { hourEnd, parseHour } from '../gaps/hours.ts';
import { DEFAULT_COVERAGE_HOURS, MAX_COVERAGE_HOURS } from '../status/coverage.ts';
import { sendJson, type WebDeps } from './respond.ts';

/**
 * GET /archive/ and GET /archive/YYYY-MM-DD-H.json.gz (ADR 0130): the store as a GH Archive
 * mirror, so another instance can name this one in GHARCHIVE_URL. An hour's file is the
 * same bytes bin/export writes, from a cache keyed by the hour's state (src/export/cache.ts)
 * and streamed from disk: a 1,000,000-push hour costs the server its read buffers, not
 * the file. Only a name matching GH Archive's exactly is an hour (the path never reaches
 * the file system: the cache names its files itself); an hour not over yet, or one the
 * store knows nothing of, is a 404 as on data.gharchive.org.
 */

/** The wildcard key the router (src/web/server.ts) files the hour files under. */
export const ARCHIVE_FILES = '/archive/*';

const FILE_PATH = /^\/archive\/(\d{4}-\d{2}-\d{2}-\d{1,2})\.json\.gz$/;

type Handler = (req: http.IncomingMessage, res: http.ServerResponse) => Promise<void>;

function header(req: http.IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v.join(', ') : v;
}

export function archiveRoutes(deps: WebDeps): { index: Handler; file: Handler } {
  const cache = new ArchiveCache({
    db: deps.db,
    logger: deps.logger,
    dataDir: deps.config.dataDir,
  });
  const now = () => (deps.clock ?? systemClock).now();

  const index: Handler = async (req, res) => {
    const raw = new URL(req.url ?? '/', 'http://localhost').searchParams.get('hours');
    const hours = raw === null ? DEFAULT_COVERAGE_HOURS : Number(raw);
    if (!/^\d+$/.test(raw ?? '1') || hours < 1 || hours > MAX_COVERAGE_HOURS) {
      sendJson(res, 400, { error: `hours must be an integer from 1 to ${MAX_COVERAGE_HOURS}` });
      return;
    }
    sendJson(res, 200, await archiveIndex(deps.db, now(), hours));
  };

  const file: Handler = async (req, res) => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    const name = FILE_PATH.exec(path)?.[1];
    const hour = name ? parseHour(name) : null;
    // GH Archive's names only (2026-01-01-5, never -05), and only hours that are over.
    if (!hour || hour.name !== name || hourEnd(hour) > now()) {
      sendJson(res, 404, { error: 'not found' });
      return;
    }
    const ifNoneMatch = header(req, 'if-none-match');
    const answer = await cache.answer(hour, ifNoneMatch);
    if (answer.kind === 'unknown') {
      sendJson(res, 404, { error: `the store holds nothing of hour ${hour.name}` });
      return;
    }
    if (answer.kind === 'not_modified' || matches(ifNoneMatch, answer.etag)) {
      if (answer.kind === 'file') await answer.handle.close();
      res.writeHead(304, { etag: answer.etag, 'cache-control': 'no-cache' });
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

  return { index, file };
}
