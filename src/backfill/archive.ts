import { createReadStream } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { pipeline, type Readable, Transform } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { createGunzip } from 'node:zlib';
import type { CommitSource } from '../platform/db/columns.ts';
import { AppError } from '../platform/errors.ts';
import { escapeUnsafe, quoted } from '../platform/quote.ts';
import { withoutUserinfo } from '../platform/redact.ts';
import { type ArchiveHour, hourFileName } from '../store/archive-hours.ts';
import { HOUR_OPEN_HEADER, parseOpenHeader } from '../store/open-hours.ts';

/**
 * Where archive bytes come from: an hour on GH Archive (or a mirror: any HTTP server with
 * the same file names, or a `file://` directory of them), or a local file. Downloads are
 * plain HTTP GETs of public files — not GitHub API requests: they never pass the request
 * gate and never touch the request budget or the `github_requests` ledger.
 *
 * Everything streams: bytes are counted as they arrive (progress), gunzipped on the way
 * (zlib works on libuv's thread pool), and never held whole.
 */

/** The hour is not on the archive (404/410): not published yet, or missing for good. */
export class ArchiveHourMissing extends AppError {
  constructor(url: string, status: number | null) {
    super('ARCHIVE_HOUR_MISSING', `${url} is not on the archive (${status ?? 'no such file'})`, {
      url,
      status,
    });
  }
}

/** The archive did not answer usefully (5xx, other status, network error, timeout). Retry later. */
export class ArchiveUnavailable extends AppError {
  constructor(url: string, detail: string, status: number | null = null, cause?: unknown) {
    super('ARCHIVE_UNAVAILABLE', `${url}: ${detail}`, { url, status }, { cause });
  }
}

/**
 * The mirror (another instance's /archive) answered 503: an import is writing into the hour
 * now. Not a failure of the mirror: the hour is read again later.
 */
export class ArchiveHourOpen extends AppError {
  constructor(url: string, reasons: string[], retryAfterSeconds: number | null) {
    super(
      'ARCHIVE_HOUR_OPEN',
      `${url}: the mirror is still importing this hour (${reasons.join(', ')})${retryAfterSeconds === null ? '' : `; it asks to retry after ${retryAfterSeconds} s`}`,
      { url, reasons, retry_after: retryAfterSeconds },
    );
  }
}

/** Retry-After as seconds (a number of seconds; a date is not used), bounded. */
function retryAfter(res: http.IncomingMessage): number | null {
  const v = res.headers['retry-after'];
  const n = typeof v === 'string' && /^\d{1,6}$/.test(v.trim()) ? Number(v.trim()) : null;
  return n === null ? null : Math.min(n, 86_400);
}

/**
 * What to check when a mirror could not be reached at all, by Node's error code: its name
 * does not resolve, nothing listens there, or the network between dropped it.
 */
export function networkHint(err: unknown): string {
  switch ((err as { code?: unknown } | null)?.code) {
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EAI_NONAME':
      return "; the mirror's host name does not resolve: check it in GHARCHIVE_URL (or --mirror) and this machine's DNS";
    case 'ECONNREFUSED':
      return "; nothing answers there: check the mirror's URL in GHARCHIVE_URL (or --mirror) and that it is up";
    case 'ECONNRESET':
    case 'ETIMEDOUT':
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
    case 'EPIPE':
      return '; check the network (and any proxy) between here and the mirror';
    default:
      return '';
  }
}

/** The file ended before its end: a cut download or a truncated gzip (some archive files are). */
export class ArchiveTruncated extends AppError {
  constructor(what: string, detail: string, cause?: unknown) {
    super('ARCHIVE_TRUNCATED', `${what} is truncated: ${detail}`, { what }, { cause });
  }
}

/**
 * The mirror answered 200 with something that is not an hour file: an HTML
 * page (a wrong path, a login or error page served as 200), or other bytes that are not gzip.
 * Running again reads the same page; the mirror's URL is what to check.
 */
export class ArchiveNotGzip extends AppError {
  constructor(what: string, looksLike: string, contentType: string | null) {
    super(
      'ARCHIVE_NOT_GZIP',
      `${what} is not a GH Archive hour file: the mirror answered 200 with ${looksLike}${contentType ? ` (content-type ${JSON.stringify(escapeUnsafe(contentType.slice(0, 80)))})` : ''}, not gzip; check the mirror's URL (a wrong path, or a login or error page)`,
      { what, content_type: contentType?.slice(0, 80) ?? null },
    );
  }
}

/** Raised inside decoded() (which has no label); readError names the file. */
class NotGzipBytes extends Error {
  readonly looksLike: string;
  readonly contentType: string | null;
  constructor(looksLike: string, contentType: string | null) {
    super(looksLike);
    this.looksLike = looksLike;
    this.contentType = contentType;
  }
}

const GZIP_MAGIC = [0x1f, 0x8b];
/** How much of a page that is not an hour file is quoted back (escaped). */
const QUOTED_PREFIX_CHARS = 60;

/** What bytes that should have been gzip look like, for a message: bounded and escaped. */
function describeNotGzip(head: Buffer): string {
  const text = head.subarray(0, 256).toString('utf8').trimStart();
  // JSON string syntax and no bidirectional or invisible character: the page is a stranger's.
  const shown = quoted([...text].slice(0, QUOTED_PREFIX_CHARS).join(''));
  if (/^<(!doctype html|html|head|body|\?xml|!--)/i.test(text)) return `an HTML page ${shown}`;
  if (/^[{[]/.test(text)) return `JSON ${shown} (an hour file is gzipped NDJSON)`;
  const hex = [...head.subarray(0, 4)].map((b) => b.toString(16).padStart(2, '0')).join(' ');
  return `bytes ${hex}… ${shown}`;
}

export interface OpenedSource {
  stream: Readable;
  /** The Content-Type an HTTP mirror gave, to name what it served instead of a file. */
  contentType?: string | null;
  /** gzip (GH Archive's hour files, a `.json.gz`) or plain NDJSON. */
  gzip: boolean;
  /** Size in bytes when known (Content-Length, file size): a changed file restarts its import. */
  bytes: number | null;
  /**
   * Why the mirror says the hour is still open (another instance's Archive-Hour-Open header,
   * src/store/open-hours.ts); empty for a final hour, GH Archive's, or a local file.
   */
  open: string[];
}

export interface ByteSource {
  /** The checkpoint key: the hour's name, or a local file's absolute path. */
  key: string;
  /** What an operator would recognise: the URL or the path. */
  label: string;
  /** The mirror (a GHARCHIVE_URL entry) an hour is read from; '' for a local file. */
  mirror: string;
  /** The archive hour's first instant; null for a local file. */
  hour: Date | null;
  open(signal?: AbortSignal): Promise<OpenedSource>;
}

/** GH Archive's own host: its hour files are GitHub's events as GitHub served them. */
const GH_ARCHIVE_HOST = 'data.gharchive.org';

/**
 * Who vouches for the commits a source's lines carry inline: GH Archive's own mirror (over
 * HTTPS) and a file the operator named on the command line are `archive`; every other
 * mirror — another instance's /archive, a copy, a file:// directory anyone may write into —
 * is a `mirror`, whose commits are kept unverified until GitHub proves them.
 */
export function inlineSourceOf(mirror: string): CommitSource {
  if (mirror === '') return 'archive';
  try {
    const u = new URL(mirror);
    return u.protocol === 'https:' && u.hostname === GH_ARCHIVE_HOST ? 'archive' : 'mirror';
  } catch {
    return 'mirror';
  }
}

export interface HttpOptions {
  /** No byte for this long (connecting, waiting for headers, or mid-body) is a timeout. */
  idleTimeoutMs?: number;
  /**
   * Fewer bytes than this a second over a whole rate window is a stall (a mirror
   * that sends a byte every 20 s never trips an idle timeout). Time the reader spends
   * holding the stream back (the database is slower than the network) does not count.
   */
  minBytesPerSecond?: number;
  rateWindowMs?: number;
  /** The whole download, headers to last byte, within this long. */
  deadlineMs?: number;
  userAgent?: string;
}

/** The download bounds of a configuration (ARCHIVE_MIN_RATE, ARCHIVE_RATE_WINDOW, ARCHIVE_DEADLINE). */
export function downloadOptions(config: {
  archive: { download: { minBytesPerSecond: number; rateWindowMs: number; deadlineMs: number } };
}): HttpOptions {
  return { ...config.archive.download };
}

const DEFAULT_IDLE_TIMEOUT_MS = 60_000;

/**
 * A URL as a message, a label or a table may show it: without its userinfo.
 * Only the request itself (http.get below) sees the mirror's user and password.
 */
function shown(url: URL): string {
  return withoutUserinfo(url.href);
}
const MAX_REDIRECTS = 5;

/**
 * Abandons a download that is too slow: past its deadline, or below the minimum rate over a
 * whole window in which the reader never held the stream back. Bytes are read off the
 * socket's counter: a 'data' listener would start the body flowing before its reader is
 * attached.
 */
function watchDownload(url: URL, req: http.ClientRequest, opts: HttpOptions, startedAt: number) {
  let res: http.IncomingMessage | null = null;
  let stopped = false;
  const timers = new Set<NodeJS.Timeout>();
  const later = (ms: number, f: () => void) => {
    const t = setTimeout(() => {
      timers.delete(t);
      if (!stopped) f();
    }, ms);
    t.unref();
    timers.add(t);
  };
  const abandon = (detail: string) => {
    const err = new ArchiveUnavailable(shown(url), detail);
    // Once the body has started, its stream carries the error to the importer.
    if (res) res.destroy(err);
    else req.destroy(err);
  };
  const stop = () => {
    stopped = true;
    for (const t of timers) clearTimeout(t);
    timers.clear();
  };
  if (opts.deadlineMs !== undefined) {
    const ms = opts.deadlineMs;
    later(Math.max(0, ms - (Date.now() - startedAt)), () =>
      abandon(`not downloaded within ${ms} ms`),
    );
  }
  const body = (r: http.IncomingMessage) => {
    res = r;
    r.once('close', stop);
    const min = opts.minBytesPerSecond;
    const window = opts.rateWindowMs;
    if (min === undefined || window === undefined) return;
    const socket = r.socket;
    const SAMPLES = 8;
    let sample = 0;
    let heldBack = false;
    let windowStart = socket.bytesRead;
    const tick = () => {
      // Held back by the reader (its buffer full, or paused), or every byte is in: the
      // network is not to blame.
      if (r.complete || r.isPaused() || r.readableLength >= r.readableHighWaterMark) {
        heldBack = true;
      }
      if (++sample >= SAMPLES) {
        const got = socket.bytesRead - windowStart;
        if (!heldBack && got < (min * window) / 1000) {
          abandon(`${got} bytes in ${window} ms, below the minimum of ${min} bytes/s`);
          return;
        }
        sample = 0;
        heldBack = false;
        windowStart = socket.bytesRead;
      }
      later(window / SAMPLES, tick);
    };
    later(window / SAMPLES, tick);
  };
  return { body, stop };
}

function get(
  url: URL,
  opts: HttpOptions,
  signal: AbortSignal | undefined,
  redirects = 0,
  startedAt = Date.now(),
) {
  return new Promise<OpenedSource>((resolve, reject) => {
    const client = url.protocol === 'https:' ? https : http;
    const req = client.get(
      url,
      {
        signal,
        headers: {
          'user-agent': opts.userAgent ?? 'github-push-ingestor backfill',
          // The file is gzip already; a transparent second encoding would only cost CPU.
          'accept-encoding': 'identity',
        },
        timeout: opts.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS,
      },
      (res) => {
        const status = res.statusCode ?? 0;
        const location = res.headers.location;
        if (status >= 300 && status < 400 && location && redirects < MAX_REDIRECTS) {
          res.resume();
          watch.stop();
          get(new URL(location, url), opts, signal, redirects + 1, startedAt).then(resolve, reject);
          return;
        }
        if (status !== 200) watch.stop();
        if (status === 404 || status === 410) {
          res.resume();
          reject(new ArchiveHourMissing(shown(url), status));
          return;
        }
        const open = parseOpenHeader(res.headers[HOUR_OPEN_HEADER]);
        if (status === 503 && open.length > 0) {
          res.resume();
          reject(new ArchiveHourOpen(shown(url), open, retryAfter(res)));
          return;
        }
        if (status !== 200) {
          res.resume();
          const wait = retryAfter(res);
          const detail = `answered ${status}${wait === null ? '' : ` (retry after ${wait} s)`}`;
          reject(new ArchiveUnavailable(shown(url), detail, status));
          return;
        }
        watch.body(res);
        const length = Number(res.headers['content-length']);
        // Hour files are gzip by name (`.json.gz`); that is what the archive serves.
        resolve({
          stream: res,
          gzip: true,
          bytes: Number.isFinite(length) ? length : null,
          contentType: res.headers['content-type'] ?? null,
          open,
        });
      },
    );
    const watch = watchDownload(url, req, opts, startedAt);
    req.on('timeout', () => {
      const ms = opts.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
      req.destroy(new ArchiveUnavailable(shown(url), `no data for ${ms} ms`));
    });
    req.on('error', (err) => {
      watch.stop();
      reject(
        err instanceof AppError || signal?.aborted
          ? err
          : new ArchiveUnavailable(
              shown(url),
              `${withoutUserinfo((err as Error).message)}${networkHint(err)}`,
              null,
              err,
            ),
      );
    });
  });
}

/**
 * An hour of GH Archive at `baseUrl` (http(s) or a file:// directory). The source's label
 * and mirror (what is logged, printed and stored: the checkpoint's key) have no userinfo;
 * the request is made with it.
 */
export function archiveHourSource(
  baseUrl: string,
  hour: ArchiveHour,
  opts: HttpOptions = {},
): ByteSource {
  const base = baseUrl.replace(/\/+$/, '');
  const url = new URL(`${base}/${hourFileName(hour)}`);
  const mirror = withoutUserinfo(base);
  if (url.protocol === 'file:') {
    const file = fileURLToPath(url);
    return {
      key: hour.name,
      label: shown(url),
      mirror,
      hour: hour.start,
      async open() {
        try {
          return await openLocal(file);
        } catch (err) {
          if ((err as AppError).code === 'FILE_NOT_FOUND')
            throw new ArchiveHourMissing(shown(url), null);
          throw err;
        }
      },
    };
  }
  return {
    key: hour.name,
    label: shown(url),
    mirror,
    hour: hour.start,
    open: (signal) => get(url, opts, signal),
  };
}

async function openLocal(file: string): Promise<OpenedSource> {
  const s = await stat(file).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'ENOENT') throw err;
    throw new AppError('FILE_NOT_FOUND', `${file} does not exist`, { file }, { cause: err });
  });
  if (!s.isFile()) throw new AppError('NOT_A_FILE', `${file} is not a regular file`, { file });
  return {
    stream: createReadStream(file, { highWaterMark: 256 * 1024 }),
    gzip: await isGzipFile(file),
    bytes: s.size,
    open: [],
  };
}

/** A file on this machine (`.json.gz` or plain NDJSON, told apart by its first bytes). */
export function localFileSource(file: string): ByteSource {
  const absolute = path.resolve(file);
  return {
    key: absolute,
    label: absolute,
    mirror: '',
    hour: null,
    open: () => openLocal(absolute),
  };
}

/** True when the file starts with gzip's magic bytes. */
async function isGzipFile(file: string): Promise<boolean> {
  const fh = await open(file, 'r');
  try {
    const buf = Buffer.alloc(2);
    const { bytesRead } = await fh.read(buf, 0, 2, 0);
    return bytesRead === 2 && buf[0] === 0x1f && buf[1] === 0x8b;
  } finally {
    await fh.close();
  }
}

/**
 * The decoded bytes of an opened source: raw bytes are counted as they arrive (`onBytes`,
 * for progress) and gunzipped when `gzip`. Errors of any stage surface on the returned
 * stream; readError() names them.
 */
export function decoded(
  opened: OpenedSource,
  gzip: boolean,
  onBytes: (n: number) => void,
): AsyncIterable<Buffer> & Readable {
  // A gzip stream starts with its magic bytes: anything else (an HTML page served as 200)
  // is said to be what it is, not "corrupt gzip … run again".
  let held: Buffer[] | null = gzip ? [] : null;
  let heldBytes = 0;
  const notGzip = (bytes: Buffer) =>
    new NotGzipBytes(describeNotGzip(bytes.subarray(0, 256)), opened.contentType ?? null);
  const counter = new Transform({
    transform(chunk: Buffer, _enc, done) {
      onBytes(chunk.length);
      if (held === null) return done(null, chunk);
      // Held until the first two bytes are in (a chunk may be one byte).
      held.push(chunk);
      heldBytes += chunk.length;
      if (heldBytes < GZIP_MAGIC.length) return done();
      const first = Buffer.concat(held, heldBytes);
      held = null;
      if (first[0] !== GZIP_MAGIC[0] || first[1] !== GZIP_MAGIC[1]) return done(notGzip(first));
      done(null, first);
    },
    flush(done) {
      // A body shorter than the magic is not gzip either.
      if (held !== null && heldBytes > 0) return done(notGzip(Buffer.concat(held, heldBytes)));
      done();
    },
  });
  const last = gzip ? createGunzip({ chunkSize: 64 * 1024 }) : counter;
  const stages = gzip ? [opened.stream, counter, last] : [opened.stream, counter];
  // The last stage is read by the caller; errors anywhere destroy every stage and reach it.
  pipeline(stages, () => {});
  return last;
}

/** What went wrong while reading `label`, as one of the archive errors when it is one of them. */
export function readError(label: string, err: unknown): Error {
  if (err instanceof AppError) return err;
  if (err instanceof NotGzipBytes) return new ArchiveNotGzip(label, err.looksLike, err.contentType);
  const e = err as NodeJS.ErrnoException;
  const message = e?.message ?? String(err);
  if (e?.code === 'Z_BUF_ERROR' || /unexpected end of file/i.test(message)) {
    return new ArchiveTruncated(label, 'the gzip stream ends early', err);
  }
  if (e?.code === 'Z_DATA_ERROR') {
    return new ArchiveTruncated(label, `the gzip data is corrupt (${message})`, err);
  }
  if (e?.code === 'ECONNRESET' || /aborted|premature close/i.test(message)) {
    return new ArchiveTruncated(label, 'the download was cut short', err);
  }
  return err as Error;
}
