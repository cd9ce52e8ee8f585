import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { routeTemplate } from '../../src/github/pacing.ts';
import { fakeApps, MINT_PATH } from './fake-github-app.ts';
import { fakeFeeds } from './fake-github-feeds.ts';
import { type Answer, DOCS, json, notFound, streamHugeBody } from './fake-github-http.ts';
import { restQuota } from './fake-github-quota.ts';
import { fakeRepos } from './fake-github-repos.ts';
import type { FakeGitHub, FakeGitHubOptions, Fault, RecordedRequest } from './fake-github-types.ts';
import { fakeGraphQL } from './fake-graphql.ts';

export { rawEvent } from './fake-github-feeds.ts';
export type * from './fake-github-types.ts';

/**
 * A local GitHub that follows GitHub's documented rules (rate limits, conditional requests, X-Poll-Interval), for tests and demos.
 *
 * Feeds (`public`, `repo:OWNER/NAME`, `org:ORG`, `user:LOGIN`; fake-github-feeds.ts): newest first; `per_page`
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
 * graph (git-world.ts builds whole histories and pushes); /repos/{o}/{n}/compare/{base}...{head}
 * answers as GitHub documents it (the newest 250 without paging, chronological pages with
 * `page`/`per_page`, 404 for an unknown commit or branch; a renamed repository's old name
 * 301s to /repositories/{id}/compare/…): see fake-compare.ts. `POST /graphql` answers from
 * the same graphs by GitHub's schema, points and limits: see fake-graphql.ts and
 * test/fixtures/github/GRAPHQL.md.
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

export async function startFakeGitHub(opts: FakeGitHubOptions = {}): Promise<FakeGitHub> {
  const enforceSerial = opts.enforceSerial ?? true;
  const apiVersion = opts.apiVersion === undefined ? '2022-11-28' : opts.apiVersion;
  const graphqlLimit = opts.graphqlLimit ?? 5000;
  const apps = fakeApps();
  const quota = restQuota({
    anonymousLimit: opts.anonymousLimit ?? 60,
    tokenLimit: opts.tokenLimit ?? 5000,
    apps,
  });
  const feeds = fakeFeeds({ pollInterval: opts.pollInterval });
  const repos = fakeRepos();
  const graphql = fakeGraphQL({
    limitFor: (credential) =>
      credential.startsWith('installation:')
        ? (apps.limitOf(Number(credential.slice('installation:'.length))) ?? graphqlLimit)
        : graphqlLimit,
  });
  let faults: (Fault & { left: number })[] = [];
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
  const hanging = new Set<http.ServerResponse>();

  function route(req: http.IncomingMessage, url: URL): Answer {
    if (req.method !== 'GET') return json(404, { message: 'Not Found', documentation_url: DOCS });
    const segs = url.pathname.split('/').slice(1).map(decodeURIComponent);
    const [a, b, c, d] = segs;
    if (segs.length === 1 && a === 'events') return feeds.serve(req, url, 'public', fake.url);
    if (segs.length === 4 && a === 'repos' && d === 'events')
      return feeds.serve(req, url, `repo:${b}/${c}`, fake.url);
    if (segs.length === 3 && a === 'orgs' && c === 'events')
      return feeds.serve(req, url, `org:${b}`, fake.url);
    if (segs.length === 3 && a === 'users' && c === 'events')
      return feeds.serve(req, url, `user:${b}`, fake.url);
    return repos.route(req, url, fake.url) ?? notFound();
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

  // Every wait ends early when the fake closes, so no timer outlives it.
  const waits = new Set<() => void>();
  const sleep = (ms: number) =>
    new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        waits.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      waits.add(done);
    });

  async function handle(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    body: string,
  ): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://fake.invalid');
    const method = req.method ?? 'GET';
    // GraphQL is a budget of its own per credential (ADR 0110): its own in-flight count.
    const isGraphQL = method === 'POST' && url.pathname === '/graphql';
    const mintFor = method === 'POST' ? MINT_PATH.exec(url.pathname) : null;
    // A token request is the App's (its JWT): it spends no installation's quota.
    const mint = mintFor ? apps.mint(req.headers.authorization, Number(mintFor[1])) : null;
    const who = mint
      ? { credential: mint.credential, bucket: null, rejected: false }
      : quota.identify(req.headers.authorization);
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
    const flightKey = isGraphQL ? `${who.credential}#graphql` : who.credential;
    const mine = (inFlightBy.get(flightKey) ?? 0) + 1;
    inFlightBy.set(flightKey, mine);
    maxInFlightBy[flightKey] = Math.max(maxInFlightBy[flightKey] ?? 0, mine);
    const concurrent = mine > 1;
    const overEndpointRate = opts.endpointRatePerMinute
      ? endpointWindow(flightKey, rec.path, rec.startedAt.getTime()) > opts.endpointRatePerMinute
      : false;
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      inFlight--;
      inFlightBy.set(flightKey, (inFlightBy.get(flightKey) ?? 1) - 1);
      rec.endedAt = new Date();
      hanging.delete(res);
    };
    res.on('close', end);

    const bucket = isGraphQL ? null : who.bucket;
    const spendOne = () => {
      if (bucket && bucket.remaining > 0) {
        bucket.remaining--;
        counted++;
        rec.counted = true;
      }
    };
    const send = (a: Answer, spend: boolean) => {
      if (spend) spendOne();
      rec.status = a.status;
      const headers: Record<string, string> = {
        'content-type': 'application/json; charset=utf-8',
        'x-github-media-type': 'github.v3; format=json',
        'x-github-request-id': `FAKE:${requests.length}`,
        ...(bucket ? quota.headers(bucket) : {}),
        ...a.headers,
      };
      if (a.body === undefined) delete headers['content-type'];
      res.writeHead(a.status, headers);
      res.end(a.body);
    };

    try {
      if (fake.onRequest) await fake.onRequest(rec);
      if (opts.latencyMs) await sleep(opts.latencyMs);

      // The REST API version the client pins (ADR 0121); GraphQL is not versioned.
      const version = req.headers['x-github-api-version'];
      if (apiVersion !== null && !isGraphQL && version !== apiVersion) {
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
        spendOne();
        rec.status = 200;
        await streamHugeBody(res, fault.hugeBody, bucket ? quota.headers(bucket) : {}, (n) => {
          rec.bytesSent = n;
        });
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
        send({ status, body, headers: fault.headers }, status !== 304 && !isGraphQL);
        return;
      }

      if (isGraphQL) {
        const gq = graphql.handle({
          credential: who.credential,
          bucket: who.credential === 'anonymous' ? null : graphql.bucketFor(who.credential),
          body,
          requestId: `FAKE:${requests.length}`,
          lookup: repos.lookup,
          sleep,
        });
        send(await gq, false);
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
    // A GraphQL query is in the body; anything else's body is read and dropped.
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > 8 * 1024 * 1024) req.destroy();
      else if (req.method === 'POST') chunks.push(chunk);
    });
    req.on('end', () => void handle(req, res, Buffer.concat(chunks).toString('utf8')));
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;

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
    revokeToken: (token) => quota.revokeToken(token),
    get inFlight() {
      return inFlight;
    },
    get secondaryLimitHits() {
      return secondaryLimitHits;
    },
    onRequest: null,
    addEvents: (feed, events) => feeds.addEvents(feed, events),
    feed: (feed) => feeds.feed(feed),
    setPollInterval: (feed, seconds) => feeds.setPollInterval(feed, seconds),
    setUser: (profile) => repos.setUser(profile),
    setRepo: (profile) => repos.setRepo(profile),
    removeUser: (login) => repos.removeUser(login),
    removeRepo: (fullName) => repos.removeRepo(fullName),
    renameRepo: (oldFullName, newFullName) => repos.renameRepo(oldFullName, newFullName),
    addCommits: (fullName, commits) => repos.addCommits(fullName, commits),
    setBranch: (fullName, branch, sha) => repos.setBranch(fullName, branch, sha),
    deleteBranch: (fullName, branch) => repos.deleteBranch(fullName, branch),
    renameBranch: (fullName, from, to) => repos.renameBranch(fullName, from, to),
    commitGraph: (fullName) => repos.commitGraph(fullName),
    defaultBranch: (fullName) => repos.defaultBranch(fullName),
    graphql: graphql.controls((o) => quota.keyOf(o)),
    setRateLimit: (setting, o) => quota.setRateLimit(setting, o),
    rateLimit: (o) => quota.rateLimit(o),
    fail(fault) {
      faults.push({ ...fault, left: fault.times ?? 1 });
    },
    reset() {
      feeds.reset();
      repos.reset();
      quota.reset();
      faults = [];
      requests.length = 0;
      counted = 0;
      maxInFlight = inFlight;
      maxInFlightBy = Object.fromEntries([...inFlightBy].filter(([, n]) => n > 0));
      secondaryLimitHits = 0;
      endpointTimes.clear();
      apps.reset();
      graphql.reset();
      fake.onRequest = null;
    },
    async close() {
      for (const done of [...waits]) done();
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return fake;
}
