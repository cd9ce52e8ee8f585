import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { routeTemplate } from '../../src/github/pacing.ts';
import { commitGraphs, type FakeCommit } from './fake-compare.ts';
import {
  type FakeAppOptions,
  fakeApps,
  MINT_PATH,
  type MintedToken,
  tokenKey,
} from './fake-github-app.ts';
import type { GitHubEvent, Json } from './github-factories.ts';

/**
 * A local GitHub that follows the documented rules of DESIGN §5, for tests and demos.
 *
 * Feeds (`public`, `repo:OWNER/NAME`, `org:ORG`, `user:LOGIN`): newest first; `per_page`
 * ≤ 100 (default 30); only the newest 300 events are reachable and a page past them is a
 * 422; a per-response ETag (If-None-Match → 304, which spends no quota); X-Poll-Interval;
 * Link rel="next". `addEvents('public', evs)` also files each event under its repo, actor
 * and org feeds (as GitHub does); adding to any other feed touches only that feed.
 * Events passed to addEvents are in ARRIVAL order: the last one is the newest.
 *
 * Profiles: /users/{login} (`[bot]` logins arrive as %5Bbot%5D), /repos/{o}/{n},
 * /repositories/{id}; a renamed repository's old path answers 301 to /repositories/{id}.
 *
 * Commits: `addCommits(repo, commits)` and `setBranch(repo, name, sha)` build a repository's
 * graph; /repos/{o}/{n}/compare/{base}...{head} answers as GitHub documents it (the newest
 * 250 without paging, chronological pages with `page`/`per_page`, 404 for an unknown
 * commit or branch): see fake-compare.ts.
 *
 * Quota: x-ratelimit-* on every response; one bucket per credential (anonymous: 60/h,
 * with an Authorization header: 5000/h; a GitHub App installation: its own, see
 * fake-github-app.ts); remaining 0 → 403. Two requests in flight at once FOR ONE
 * CREDENTIAL → 403 secondary limit with retry-after: 60, recorded in `secondaryLimitHits`
 * (different credentials may overlap, as on GitHub).
 *
 * GitHub Apps: `addApp` registers an App by its public key; `POST
 * /app/installations/{id}/access_tokens` verifies the RS256 JWT and mints `ghs_…` tokens
 * (`mintedTokens`, `jwtsSeen`), which expire (`tokenTtlSeconds`) and can be revoked.
 */

export type FeedKey = string;

/**
 * An event served verbatim: `text` is spliced into the page as is (poison a JSON encoder
 * would not produce: 64-bit ids, 20,000 levels of nesting). `id` files and replaces it.
 */
const RAW_TEXT = Symbol('rawText');
export function rawEvent(text: string, id: string): GitHubEvent {
  const ev = { id, type: 'RawEvent', actor: { id: 0, login: '' }, repo: { id: 0, name: '' } };
  return Object.assign(ev, { [RAW_TEXT]: text }) as unknown as GitHubEvent;
}
function eventText(ev: GitHubEvent): string {
  return (ev as unknown as { [RAW_TEXT]?: string })[RAW_TEXT] ?? JSON.stringify(ev);
}

export interface RateLimitSetting {
  limit?: number;
  remaining?: number;
  resetAt?: Date;
}

export interface Fault {
  /** Exact pathname (e.g. `/users/octocat`), pathname + query, or a RegExp on pathname + query. */
  path: string | RegExp;
  method?: string;
  /** Status to answer (default 500 unless only delayMs is given: then the normal answer, late). */
  status?: number;
  /** How many requests this fault applies to (default 1; Infinity for all). */
  times?: number;
  /** Wait this long before answering (or before the normal answer). */
  delayMs?: number;
  /** Never answer (the client must time out). */
  hang?: boolean;
  /** Destroy the socket without an answer (ECONNRESET on the client). */
  reset?: boolean;
  /** Raw body to send (e.g. truncated JSON); default a GitHub-style error JSON. */
  body?: string;
  headers?: Record<string, string>;
  /**
   * A 200 of this many bytes, streamed (never held): one events-shaped JSON array whose one
   * event holds a string of the whole size (ADR 0120's hostile answer). Written only as fast
   * as the client reads; `bytesSent` on the request says how much it took before it hung up.
   */
  hugeBody?: { bytes: number; declareLength?: boolean };
}

export interface RecordedRequest {
  method: string;
  /** Decoded pathname, e.g. `/users/dependabot[bot]`. */
  path: string;
  /** Raw pathname + query as sent on the wire. */
  rawUrl: string;
  query: Record<string, string>;
  headers: http.IncomingHttpHeaders;
  /**
   * Whose request: 'anonymous', 'token:<sha256 prefix>' (the client's label),
   * 'installation:<id>', 'app:<id>' (a token request), 'invalid' (a token GitHub rejects).
   */
  credential: string;
  /** null while in flight, or when the fault reset/hung the connection. */
  status: number | null;
  counted: boolean;
  startedAt: Date;
  endedAt: Date | null;
  /** Body bytes written for a `hugeBody` fault before the answer ended or the client hung up. */
  bytesSent?: number;
}

export interface FakeGitHubOptions {
  port?: number;
  /** Default hourly limit for anonymous callers (60) and for token callers (5000). */
  anonymousLimit?: number;
  tokenLimit?: number;
  /** X-Poll-Interval for feeds without their own setting (default 60). */
  pollInterval?: number;
  /** Extra latency for every request, so concurrency is observable (default 0). */
  latencyMs?: number;
  /** Answer concurrent requests with a secondary-limit 403 (default true). */
  enforceSerial?: boolean;
  /**
   * GitHub's per-endpoint secondary limit: a credential's request past this many to one
   * route template in the last 60 s is a secondary-limit 403 (retry-after: 60). Default off.
   */
  endpointRatePerMinute?: number;
  /**
   * The X-GitHub-Api-Version every REST request must carry (default `2022-11-28`, the version
   * the client pins: ADR 0121); a request without it, or with another, is a 400. null: no
   * check. GraphQL (`/graphql`) is not versioned and never checked.
   */
  apiVersion?: string | null;
}

export interface FakeGitHub {
  readonly url: string;
  readonly requests: RecordedRequest[];
  /** Requests that spent quota (not 304s, not primary-limit 403s, not resets/hangs). */
  readonly countedRequests: number;
  /** Most requests in flight at once, any credentials. */
  readonly maxInFlight: number;
  /** Most requests in flight at once for one credential, per credential. */
  readonly maxInFlightByCredential: Readonly<Record<string, number>>;
  readonly inFlight: number;
  readonly secondaryLimitHits: number;
  /** Called with each request after it is recorded and before it is answered. */
  onRequest: ((req: RecordedRequest) => void | Promise<void>) | null;
  addEvents(feed: FeedKey, events: GitHubEvent[]): void;
  /** The feed's current events, newest first (all of them, not only the newest 300). */
  feed(feed: FeedKey): GitHubEvent[];
  setUser(profile: Json & { id: number; login: string }): void;
  setRepo(profile: Json & { id: number; full_name: string }): void;
  removeUser(login: string): void;
  removeRepo(fullName: string): void;
  renameRepo(oldFullName: string, newFullName: string): void;
  /** A string is sent as is (`0.5`, `1e10`: what a hostile answer could say). */
  setPollInterval(feed: FeedKey, seconds: number | string): void;
  /** Commits of a repository, parents first (see fake-compare.ts). */
  addCommits(fullName: string, commits: FakeCommit[]): void;
  setBranch(fullName: string, branch: string, sha: string): void;
  /**
   * Without `token`/`installation`: every bucket now and every new one; with one: that
   * token's (or installation's) bucket.
   */
  setRateLimit(setting: RateLimitSetting, opts?: BucketOf): void;
  rateLimit(opts?: BucketOf): {
    limit: number;
    remaining: number;
    resetAt: Date;
    used: number;
  };
  fail(fault: Fault): void;
  /** Register a GitHub App (its public key) and its installations. */
  addApp(app: FakeAppOptions): void;
  /** The installation is gone: its token requests answer 404. */
  removeInstallation(installationId: number): void;
  /** Every token minted so far for the installation answers 401 from now on. */
  revokeInstallationTokens(installationId: number): void;
  /** This personal token answers 401 ("Bad credentials") from now on, as a revoked one does. */
  revokeToken(token: string): void;
  /** Installation tokens minted, in order (the tests' sentinels). */
  readonly mintedTokens: readonly MintedToken[];
  /** Every App JWT received by the token endpoint (the tests' sentinels). */
  readonly jwtsSeen: readonly string[];
  /** Back to the state right after start: no data, faults, hook, requests or counters. */
  reset(): void;
  close(): Promise<void>;
}

export interface BucketOf {
  token?: string | null;
  installation?: number;
}

interface Bucket {
  limit: number;
  remaining: number;
  resetAt: Date;
}

interface RepoEntry {
  profile: Json & { id: number; full_name: string };
}

const DOCS = 'https://docs.github.com/rest';
const WINDOW = 300;

function bodyHash(s: string): string {
  return createHash('sha1').update(s).digest('hex');
}

/** A 200 of `bytes` bytes, one events page holding one giant string, written as read. */
async function streamHugeBody(
  res: http.ServerResponse,
  o: { bytes: number; declareLength?: boolean },
  rec: RecordedRequest,
  headers: Record<string, string>,
): Promise<void> {
  const head =
    '[{"id":"1","type":"PushEvent","actor":{"id":1,"login":"x"},"repo":{"id":1,"name":"x/y"},"payload":{"pad":"';
  const tail = '"}}]';
  const fill = Math.max(0, o.bytes - head.length - tail.length);
  res.writeHead(200, {
    'content-type': 'application/json; charset=utf-8',
    ...headers,
    ...(o.declareLength ? { 'content-length': String(head.length + fill + tail.length) } : {}),
  });
  rec.bytesSent = 0;
  let closed = false;
  res.once('close', () => {
    closed = true;
  });
  const write = async (chunk: string) => {
    if (closed) return;
    rec.bytesSent! += chunk.length;
    if (!res.write(chunk)) {
      await new Promise<void>((r) => {
        const done = () => {
          res.off('drain', done);
          res.off('close', done);
          r();
        };
        res.once('drain', done);
        res.once('close', done);
      });
    }
  };
  await write(head);
  const block = 'a'.repeat(64 * 1024);
  for (let left = fill; left > 0 && !closed; left -= block.length) {
    await write(left >= block.length ? block : block.slice(0, left));
  }
  await write(tail);
  if (!closed) res.end();
}

function nextHour(): Date {
  return new Date(Math.ceil((Date.now() + 1) / 1000) * 1000 + 3600_000);
}

export async function startFakeGitHub(opts: FakeGitHubOptions = {}): Promise<FakeGitHub> {
  const anonymousLimit = opts.anonymousLimit ?? 60;
  const tokenLimit = opts.tokenLimit ?? 5000;
  const enforceSerial = opts.enforceSerial ?? true;
  const apiVersion = opts.apiVersion === undefined ? '2022-11-28' : opts.apiVersion;

  let feeds = new Map<string, GitHubEvent[]>(); // newest first
  let pollIntervals = new Map<string, number | string>();
  let users = new Map<string, Json & { id: number; login: string }>(); // lower(login)
  let repos = new Map<string, RepoEntry>(); // lower(full_name)
  let reposById = new Map<number, RepoEntry>();
  let movedRepos = new Map<string, number>(); // lower(old full_name) → id
  let buckets = new Map<string, Bucket>();
  let bucketOverride: RateLimitSetting | null = null;
  let faults: (Fault & { left: number })[] = [];
  const revokedTokens = new Set<string>();
  const requests: RecordedRequest[] = [];
  let counted = 0;
  let inFlight = 0;
  let maxInFlight = 0;
  const inFlightBy = new Map<string, number>();
  let maxInFlightBy: Record<string, number> = {};
  let secondaryLimitHits = 0;
  // Per credential and route template: when its recent requests arrived (the last 60 s).
  const endpointTimes = new Map<string, number[]>();
  /** Counts this request in its credential's endpoint window; returns the window's size. */
  const endpointWindow = (credential: string, path: string, at: number): number => {
    const key = `${credential} ${routeTemplate(path)}`;
    const times = endpointTimes.get(key) ?? [];
    times.push(at);
    let drop = 0;
    while (drop < times.length && times[drop]! <= at - 60_000) drop++;
    if (drop > 0) times.splice(0, drop);
    endpointTimes.set(key, times);
    return times.length;
  };
  const apps = fakeApps();
  const graphs = commitGraphs();
  const hanging = new Set<http.ServerResponse>();

  const feedOf = (key: string) => {
    let f = feeds.get(key.toLowerCase());
    if (!f) {
      f = [];
      feeds.set(key.toLowerCase(), f);
    }
    return f;
  };

  /** The bucket of a credential: 'anonymous', a token's label, or 'installation:<id>'. */
  function bucketFor(key: string, ownLimit?: number): Bucket {
    let b = buckets.get(key);
    if (!b) {
      const limit =
        bucketOverride?.limit ?? ownLimit ?? (key === 'anonymous' ? anonymousLimit : tokenLimit);
      b = {
        limit,
        remaining: bucketOverride?.remaining ?? limit,
        resetAt: bucketOverride?.resetAt ?? nextHour(),
      };
      buckets.set(key, b);
    }
    if (Date.now() >= b.resetAt.getTime()) {
      b.remaining = b.limit;
      b.resetAt = nextHour();
    }
    return b;
  }

  const keyOf = (o: BucketOf = {}) =>
    o.installation !== undefined
      ? `installation:${o.installation}`
      : o.token
        ? tokenKey(o.token)
        : 'anonymous';

  const ownLimit = (o: BucketOf = {}) =>
    o.installation !== undefined ? apps.limitOf(o.installation) : undefined;

  /**
   * Who is asking, from the Authorization header: a token (its bucket), an installation
   * token (the installation's bucket, or a 401 when expired, revoked or unknown), nobody.
   */
  function identify(authorization: string | undefined): {
    credential: string;
    bucket: Bucket | null;
    rejected: boolean;
  } {
    const token = authorization?.replace(/^(token|bearer)\s+/i, '');
    if (!token) return { credential: 'anonymous', bucket: bucketFor('anonymous'), rejected: false };
    const installation = apps.identify(token);
    if (installation === null) {
      if (revokedTokens.has(token)) return { credential: 'invalid', bucket: null, rejected: true };
      const credential = tokenKey(token);
      return { credential, bucket: bucketFor(credential), rejected: false };
    }
    if (!installation.ok) return { credential: 'invalid', bucket: null, rejected: true };
    const credential = `installation:${installation.installationId}`;
    return { credential, bucket: bucketFor(credential, installation.limit), rejected: false };
  }

  function rateHeaders(b: Bucket): Record<string, string> {
    return {
      'x-ratelimit-limit': String(b.limit),
      'x-ratelimit-remaining': String(b.remaining),
      'x-ratelimit-reset': String(Math.floor(b.resetAt.getTime() / 1000)),
      'x-ratelimit-used': String(b.limit - b.remaining),
      'x-ratelimit-resource': 'core',
    };
  }

  interface Answer {
    status: number;
    body?: string;
    headers?: Record<string, string>;
  }

  const json = (status: number, value: unknown, headers: Record<string, string> = {}): Answer => ({
    status,
    body: JSON.stringify(value),
    headers,
  });
  const notFound = () =>
    json(404, { message: 'Not Found', documentation_url: DOCS, status: '404' });

  /** A 200 with an ETag, or a 304 when the client already holds that ETag. */
  function conditional(
    req: http.IncomingMessage,
    value: unknown,
    headers: Record<string, string> = {},
    text?: string,
  ): Answer {
    const body = text ?? JSON.stringify(value);
    const etag = `W/"${bodyHash(body)}"`;
    if (req.headers['if-none-match'] === etag)
      return { status: 304, headers: { etag, ...headers } };
    return { status: 200, body, headers: { etag, ...headers } };
  }

  function serveFeed(req: http.IncomingMessage, url: URL, key: string): Answer {
    const perPage = Math.min(
      100,
      Math.max(1, Number(url.searchParams.get('per_page') ?? 30) || 30),
    );
    const page = Math.max(1, Number(url.searchParams.get('page') ?? 1) || 1);
    const start = (page - 1) * perPage;
    if (start >= WINDOW) {
      return json(422, {
        message:
          'In order to keep the API fast for everyone, pagination is limited for this resource.',
        documentation_url: `${DOCS}/activity/events`,
        status: '422',
      });
    }
    const events = feeds.get(key.toLowerCase()) ?? [];
    const reachable = Math.min(WINDOW, events.length);
    const slice = events.slice(start, Math.min(start + perPage, reachable));
    const headers: Record<string, string> = {
      'x-poll-interval': String(pollIntervals.get(key.toLowerCase()) ?? opts.pollInterval ?? 60),
    };
    if (start + perPage < reachable) {
      const link = (p: number) => {
        const u = new URL(url.pathname, fake.url);
        u.searchParams.set('per_page', String(perPage));
        u.searchParams.set('page', String(p));
        return u.toString();
      };
      const last = Math.ceil(reachable / perPage);
      headers.link = `<${link(page + 1)}>; rel="next", <${link(last)}>; rel="last"`;
    }
    return conditional(req, slice, headers, `[${slice.map(eventText).join(',')}]`);
  }

  function route(req: http.IncomingMessage, url: URL): Answer {
    if (req.method !== 'GET') return json(404, { message: 'Not Found', documentation_url: DOCS });
    const segs = url.pathname.split('/').slice(1).map(decodeURIComponent);
    const [a, b, c, d] = segs;
    if (segs.length === 1 && a === 'events') return serveFeed(req, url, 'public');
    if (segs.length === 4 && a === 'repos' && d === 'events')
      return serveFeed(req, url, `repo:${b}/${c}`);
    if (segs.length === 3 && a === 'orgs' && c === 'events') return serveFeed(req, url, `org:${b}`);
    if (segs.length === 3 && a === 'users' && c === 'events')
      return serveFeed(req, url, `user:${b}`);
    if (segs.length === 2 && a === 'users') {
      const u = users.get(b!.toLowerCase());
      return u ? conditional(req, u) : notFound();
    }
    if (segs.length >= 5 && a === 'repos' && d === 'compare') {
      const answer = graphs.compare(`${b}/${c}`, segs.slice(4).join('/'), url, fake.url);
      return answer ? json(answer.status, answer.body, answer.headers) : notFound();
    }
    if (segs.length === 3 && a === 'repos') {
      const name = `${b}/${c}`.toLowerCase();
      const r = repos.get(name);
      if (r) return conditional(req, r.profile);
      const movedTo = movedRepos.get(name);
      if (movedTo !== undefined) {
        const location = `${fake.url}/repositories/${movedTo}`;
        return json(
          301,
          { message: 'Moved Permanently', url: location, documentation_url: DOCS },
          { location },
        );
      }
      return notFound();
    }
    if (segs.length === 2 && a === 'repositories' && /^\d+$/.test(b!)) {
      const r = reposById.get(Number(b));
      return r ? conditional(req, r.profile) : notFound();
    }
    return notFound();
  }

  function takeFault(method: string, url: URL): Fault | null {
    const raw = url.pathname + url.search;
    for (const f of faults) {
      if (f.left <= 0) continue;
      if (f.method && f.method.toUpperCase() !== method) continue;
      const hit =
        typeof f.path === 'string'
          ? f.path === url.pathname || f.path === raw || f.path === decodeURIComponent(url.pathname)
          : f.path.test(raw) || f.path.test(decodeURIComponent(raw));
      if (!hit) continue;
      f.left--;
      faults = faults.filter((x) => x.left > 0);
      return f;
    }
    return null;
  }

  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://fake.invalid');
    const method = req.method ?? 'GET';
    const mintFor = method === 'POST' ? MINT_PATH.exec(url.pathname) : null;
    // A token request is the App's (its JWT): it spends no installation's quota.
    const mint = mintFor ? apps.mint(req.headers.authorization, Number(mintFor[1])) : null;
    const who = mint
      ? { credential: mint.credential, bucket: null, rejected: false }
      : identify(req.headers.authorization);
    const rec: RecordedRequest = {
      method,
      path: decodeURIComponent(url.pathname),
      rawUrl: url.pathname + url.search,
      query: Object.fromEntries(url.searchParams),
      headers: req.headers,
      credential: who.credential,
      status: null,
      counted: false,
      startedAt: new Date(),
      endedAt: null,
    };
    requests.push(rec);
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    const mine = (inFlightBy.get(who.credential) ?? 0) + 1;
    inFlightBy.set(who.credential, mine);
    maxInFlightBy[who.credential] = Math.max(maxInFlightBy[who.credential] ?? 0, mine);
    const concurrent = mine > 1;
    const overEndpointRate = opts.endpointRatePerMinute
      ? endpointWindow(who.credential, rec.path, rec.startedAt.getTime()) >
        opts.endpointRatePerMinute
      : false;
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      inFlight--;
      inFlightBy.set(who.credential, (inFlightBy.get(who.credential) ?? 1) - 1);
      rec.endedAt = new Date();
      hanging.delete(res);
    };
    res.on('close', end);

    const bucket = who.bucket;
    const send = (a: Answer, spend: boolean) => {
      if (spend && bucket && bucket.remaining > 0) {
        bucket.remaining--;
        counted++;
        rec.counted = true;
      }
      rec.status = a.status;
      const headers: Record<string, string> = {
        'content-type': 'application/json; charset=utf-8',
        'x-github-media-type': 'github.v3; format=json',
        'x-github-request-id': `FAKE:${requests.length}`,
        ...(bucket ? rateHeaders(bucket) : {}),
        ...a.headers,
      };
      if (a.body === undefined) delete headers['content-type'];
      res.writeHead(a.status, headers);
      res.end(a.body);
    };

    try {
      if (fake.onRequest) await fake.onRequest(rec);
      if (opts.latencyMs) await sleep(opts.latencyMs);

      const version = req.headers['x-github-api-version'];
      if (apiVersion !== null && rec.path !== '/graphql' && version !== apiVersion) {
        send(
          json(400, {
            message: `fake GitHub: X-GitHub-Api-Version must be ${apiVersion} (got ${version === undefined ? 'none' : JSON.stringify(version)})`,
            documentation_url: `${DOCS}/about-the-rest-api/api-versions`,
          }),
          false,
        );
        return;
      }

      if ((enforceSerial && concurrent) || overEndpointRate) {
        secondaryLimitHits++;
        send(
          json(
            403,
            {
              message:
                'You have exceeded a secondary rate limit. Please wait a few minutes before you try again.',
              documentation_url: `${DOCS}/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits`,
              status: '403',
            },
            { 'retry-after': '60' },
          ),
          true,
        );
        return;
      }

      if (mint) {
        send(json(mint.status, mint.body), false);
        return;
      }
      if (who.rejected) {
        send(json(401, { message: 'Bad credentials', documentation_url: DOCS }), false);
        return;
      }

      const fault = takeFault(rec.method, url);
      if (fault?.delayMs) await sleep(fault.delayMs);
      if (fault?.hang) {
        hanging.add(res);
        return;
      }
      if (fault?.reset) {
        req.socket.destroy();
        return;
      }
      if (fault?.hugeBody) {
        if (bucket && bucket.remaining > 0) {
          bucket.remaining--;
          counted++;
          rec.counted = true;
        }
        rec.status = 200;
        await streamHugeBody(res, fault.hugeBody, rec, bucket ? rateHeaders(bucket) : {});
        return;
      }
      if (fault && (fault.status !== undefined || fault.body !== undefined || !fault.delayMs)) {
        const status = fault.status ?? 500;
        const body =
          fault.body ??
          (status === 304
            ? undefined
            : JSON.stringify({
                message: http.STATUS_CODES[status] ?? 'Error',
                documentation_url: DOCS,
              }));
        send({ status, body, headers: fault.headers }, status !== 304);
        return;
      }

      if (bucket && bucket.remaining <= 0) {
        send(
          json(403, {
            message: `API rate limit exceeded for ${req.socket.remoteAddress}. (But here's the good news: Authenticated requests get a higher rate limit.)`,
            documentation_url: `${DOCS}/overview/resources-in-the-rest-api#rate-limiting`,
          }),
          false,
        );
        return;
      }
      const answer = route(req, url);
      send(answer, answer.status !== 304);
    } catch (err) {
      if (!res.headersSent) send(json(500, { message: String(err) }), false);
    }
  }

  const server = http.createServer((req, res) => {
    // Drain any body; GET has none, but a client may send one.
    req.resume();
    void handle(req, res);
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  function fileEvent(key: string, ev: GitHubEvent) {
    const f = feedOf(key);
    const i = f.findIndex((e) => e.id === ev.id);
    if (i >= 0) f.splice(i, 1);
    f.unshift(ev);
  }

  const fake: FakeGitHub = {
    url: `http://127.0.0.1:${port}`,
    requests,
    get countedRequests() {
      return counted;
    },
    get maxInFlight() {
      return maxInFlight;
    },
    get maxInFlightByCredential() {
      return maxInFlightBy;
    },
    get mintedTokens() {
      return apps.minted;
    },
    get jwtsSeen() {
      return apps.jwts;
    },
    addApp: (app) => apps.addApp(app),
    removeInstallation: (id) => apps.removeInstallation(id),
    revokeInstallationTokens: (id) => apps.revokeTokens(id),
    revokeToken: (token) => {
      revokedTokens.add(token);
    },
    get inFlight() {
      return inFlight;
    },
    get secondaryLimitHits() {
      return secondaryLimitHits;
    },
    onRequest: null,
    addEvents(feed, events) {
      for (const ev of events) {
        fileEvent(feed, ev);
        if (feed.toLowerCase() === 'public') {
          fileEvent(`repo:${ev.repo.name}`, ev);
          fileEvent(`user:${ev.actor.login}`, ev);
          if (ev.org) fileEvent(`org:${ev.org.login}`, ev);
        }
      }
    },
    feed(feed) {
      return [...(feeds.get(feed.toLowerCase()) ?? [])];
    },
    setUser(profile) {
      for (const [k, u] of users) if (u.id === profile.id) users.delete(k);
      users.set(profile.login.toLowerCase(), profile);
    },
    setRepo(profile) {
      const old = reposById.get(profile.id);
      if (old) repos.delete(old.profile.full_name.toLowerCase());
      const entry = { profile };
      repos.set(profile.full_name.toLowerCase(), entry);
      reposById.set(profile.id, entry);
      movedRepos.delete(profile.full_name.toLowerCase());
    },
    removeUser(login) {
      users.delete(login.toLowerCase());
    },
    removeRepo(fullName) {
      const r = repos.get(fullName.toLowerCase());
      if (!r) return;
      repos.delete(fullName.toLowerCase());
      reposById.delete(r.profile.id);
    },
    renameRepo(oldFullName, newFullName) {
      const r = repos.get(oldFullName.toLowerCase());
      if (!r) throw new Error(`fake GitHub: no repository ${oldFullName} to rename`);
      const [owner, name] = newFullName.split('/') as [string, string];
      const ownerObj = (r.profile.owner ?? {}) as Json;
      fake.setRepo({
        ...r.profile,
        full_name: newFullName,
        name,
        owner: { ...ownerObj, login: owner },
        url: `https://api.github.com/repos/${newFullName}`,
        html_url: `https://github.com/${newFullName}`,
      });
      movedRepos.set(oldFullName.toLowerCase(), r.profile.id);
    },
    setPollInterval(feed, seconds) {
      pollIntervals.set(feed.toLowerCase(), seconds);
    },
    addCommits: (fullName, commits) => graphs.addCommits(fullName, commits),
    setBranch: (fullName, branch, sha) => graphs.setBranch(fullName, branch, sha),
    setRateLimit(setting, o = {}) {
      const apply = (b: Bucket) => {
        if (setting.limit !== undefined) b.limit = setting.limit;
        if (setting.remaining !== undefined) b.remaining = setting.remaining;
        if (setting.resetAt !== undefined) b.resetAt = setting.resetAt;
      };
      if (o.token !== undefined || o.installation !== undefined) {
        apply(bucketFor(keyOf(o), ownLimit(o)));
        return;
      }
      bucketOverride = { ...bucketOverride, ...setting };
      for (const b of buckets.values()) apply(b);
    },
    rateLimit(o = {}) {
      const b = bucketFor(keyOf(o), ownLimit(o));
      return { ...b, used: b.limit - b.remaining };
    },
    fail(fault) {
      faults.push({ ...fault, left: fault.times ?? 1 });
    },
    reset() {
      feeds = new Map();
      pollIntervals = new Map();
      users = new Map();
      repos = new Map();
      reposById = new Map();
      movedRepos = new Map();
      buckets = new Map();
      bucketOverride = null;
      faults = [];
      revokedTokens.clear();
      requests.length = 0;
      counted = 0;
      maxInFlight = inFlight;
      maxInFlightBy = Object.fromEntries([...inFlightBy].filter(([, n]) => n > 0));
      secondaryLimitHits = 0;
      endpointTimes.clear();
      apps.reset();
      graphs.reset();
      fake.onRequest = null;
    },
    async close() {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return fake;
}
