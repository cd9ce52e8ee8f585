import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { type GitHubEvent, otherEvent, pushEvent } from './github-factories.ts';

/**
 * A local GH Archive for tests (HTTP on 127.0.0.1): `GET /YYYY-MM-DD-H.json.gz` answers
 * the hour's gzipped NDJSON, an unknown hour is a 404 as on data.gharchive.org, and faults
 * can be injected per hour (a status for the next N requests, a body cut mid-way, a
 * hang). Hours are filed by whatever the test puts in them, so "an event filed in a
 * neighbouring hour" (GH Archive files by crawl time since May 2025) is just an event put
 * in the next hour's file.
 */

export interface ArchiveFault {
  /** Answer this status instead (default 503). */
  status?: number;
  /** For how many requests (default 1; Infinity for all). */
  times?: number;
  /** Send the headers and this many body bytes, then destroy the connection. */
  cutAfterBytes?: number;
  /**
   * With cutAfterBytes: the cut waits (the connection open, the bytes before it sent) until
   * this resolves: a test that needs the client to have done something with the first part
   * (committed a chunk) waits on that signal instead of hoping the machine is fast enough.
   */
  cutWhen?: () => Promise<unknown>;
  /** Never answer. */
  hang?: boolean;
  /**
   * Send the headers and this many body bytes, then wait (the connection open) until
   * `resumeWhen` resolves, then send the rest: an import held part-way through a file, its
   * first chunks committed, for as long as the test needs it to be running.
   */
  pauseAfterBytes?: number;
  resumeWhen?: () => Promise<unknown>;
  /** Send `head` body bytes at once, then `bytes` every `everyMs` (a stalling mirror). */
  trickle?: { head: number; bytes: number; everyMs: number };
}

export interface ArchiveRequest {
  path: string;
  status: number | null;
  at: Date;
  /** The Authorization header it came with (a mirror behind basic auth), or null. */
  authorization: string | null;
}

export interface ArchiveServer {
  readonly url: string;
  readonly requests: ArchiveRequest[];
  /** Serves `body` (already gzipped, possibly broken on purpose) as the hour's file. */
  setFile(hour: string, body: Buffer, contentType?: string): void;
  /** Serves these NDJSON lines (events are JSON-encoded; strings are written as they are). */
  setHour(hour: string, lines: (GitHubEvent | string)[]): void;
  removeHour(hour: string): void;
  fail(hour: string, fault: ArchiveFault): void;
  /** From now on, a request without this user and password (basic auth) is answered 401. */
  requireBasicAuth(user: string, password: string): void;
  close(): Promise<void>;
}

export function ndjson(lines: (GitHubEvent | string | Record<string, unknown>)[]): string {
  return `${lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n')}\n`;
}

export function gzipLines(lines: (GitHubEvent | string | Record<string, unknown>)[]): Buffer {
  return gzipSync(ndjson(lines));
}

/** A gzip file cut short: only the first `keep` share of its bytes (no end-of-stream trailer). */
export function truncatedGzip(lines: (GitHubEvent | string)[], keep = 0.6): Buffer {
  const full = gzipLines(lines);
  return full.subarray(0, Math.floor(full.length * keep));
}

/** `n` events spread over the hour starting `start`: every other one a push (others vary). */
export function hourOfEvents(
  start: Date,
  n: number,
  o: { firstId?: number; pushes?: 'half' | 'all' } = {},
): GitHubEvent[] {
  const events: GitHubEvent[] = [];
  const firstId = o.firstId ?? 90_000_000_000;
  const types = ['WatchEvent', 'IssuesEvent', 'CreateEvent', 'ForkEvent'];
  for (let i = 0; i < n; i++) {
    const created_at = new Date(start.getTime() + Math.floor((i * 3_600_000) / n));
    const id = firstId + i;
    const isPush = o.pushes === 'all' || i % 2 === 0;
    events.push(
      isPush
        ? pushEvent({ id, created_at })
        : otherEvent(types[i % types.length]!, { id, created_at }),
    );
  }
  return events;
}

export async function startArchiveServer(): Promise<ArchiveServer> {
  const files = new Map<string, Buffer>();
  const contentTypes = new Map<string, string>();
  let faults = new Map<string, (ArchiveFault & { left: number })[]>();
  const requests: ArchiveRequest[] = [];
  const hanging = new Set<http.ServerResponse>();
  let basicAuth: string | null = null;

  const server = http.createServer((req, res) => {
    const rec: ArchiveRequest = {
      path: req.url ?? '/',
      status: null,
      at: new Date(),
      authorization: req.headers.authorization ?? null,
    };
    requests.push(rec);
    if (basicAuth !== null && req.headers.authorization !== basicAuth) {
      rec.status = 401;
      res.writeHead(401, { 'content-type': 'text/plain', 'www-authenticate': 'Basic' });
      res.end('authentication required\n');
      return;
    }
    const m = /^\/(\d{4}-\d{2}-\d{2}-\d{1,2})\.json\.gz$/.exec(req.url ?? '');
    const hour = m?.[1];
    const fault = hour ? faults.get(hour)?.find((f) => f.left > 0) : undefined;
    if (fault) fault.left--;
    if (fault?.hang) {
      hanging.add(res);
      return;
    }
    const body = hour ? files.get(hour) : undefined;
    if (fault?.trickle && body) {
      rec.status = 200;
      res.writeHead(200, {
        'content-type': 'application/gzip',
        'content-length': String(body.length),
      });
      hanging.add(res);
      const { head, bytes, everyMs } = fault.trickle;
      let at = Math.min(head, body.length);
      res.write(body.subarray(0, at));
      const timer = setInterval(() => {
        if (res.destroyed || at >= body.length) {
          clearInterval(timer);
          if (!res.destroyed) res.end();
          return;
        }
        res.write(body.subarray(at, at + bytes));
        at += bytes;
      }, everyMs);
      res.on('close', () => clearInterval(timer));
      return;
    }
    if (fault?.cutAfterBytes !== undefined && body) {
      rec.status = 200;
      res.writeHead(200, {
        'content-type': 'application/gzip',
        'content-length': String(body.length),
      });
      // In pieces, as a network delivers them, so the client reads some before the cut.
      const part = body.subarray(0, fault.cutAfterBytes);
      let at = 0;
      const next = () => {
        if (at >= part.length) {
          if (fault.cutWhen) void fault.cutWhen().finally(() => res.destroy());
          else res.destroy();
          return;
        }
        const piece = part.subarray(at, at + 16_384);
        at += piece.length;
        res.write(piece, () => setTimeout(next, 2));
      };
      next();
      return;
    }
    if (fault?.pauseAfterBytes !== undefined && body) {
      rec.status = 200;
      res.writeHead(200, {
        'content-type': 'application/gzip',
        'content-length': String(body.length),
      });
      hanging.add(res);
      const pauseAt = Math.min(fault.pauseAfterBytes, body.length);
      let at = 0;
      const next = () => {
        if (res.destroyed) return;
        if (at === pauseAt && fault.resumeWhen) {
          const resume = fault.resumeWhen;
          fault.resumeWhen = undefined;
          void resume().then(next);
          return;
        }
        if (at >= body.length) {
          res.end();
          return;
        }
        const piece = body.subarray(
          at,
          Math.min(at + 16_384, at < pauseAt ? pauseAt : body.length),
        );
        at += piece.length;
        res.write(piece, () => setTimeout(next, 1));
      };
      next();
      return;
    }
    if (fault) {
      rec.status = fault.status ?? 503;
      res.writeHead(rec.status, { 'content-type': 'text/plain' });
      res.end('fault injected\n');
      return;
    }
    if (!body) {
      rec.status = 404;
      res.writeHead(404, { 'content-type': 'application/xml' });
      res.end('<Error><Code>NoSuchKey</Code></Error>');
      return;
    }
    rec.status = 200;
    res.writeHead(200, {
      'content-type': contentTypes.get(hour!) ?? 'application/gzip',
      'content-length': String(body.length),
    });
    res.end(body);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    setFile(hour, body, contentType) {
      files.set(hour, body);
      if (contentType) contentTypes.set(hour, contentType);
      else contentTypes.delete(hour);
    },
    setHour(hour, lines) {
      files.set(hour, gzipLines(lines));
    },
    removeHour(hour) {
      files.delete(hour);
    },
    requireBasicAuth(user, password) {
      basicAuth = `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
    },
    fail(hour, fault) {
      const list = faults.get(hour) ?? [];
      list.push({ ...fault, left: fault.times ?? 1 });
      faults.set(hour, list);
    },
    async close() {
      for (const res of hanging) res.destroy();
      faults = new Map();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
