import { spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import { otherEvent, pushEvent, repoProfile, userProfile } from '../support/github-factories.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';

/** The fake GitHub itself follows GitHub's documented rate-limit rules: other tests rely on it doing so. */

const fake = useFakeGitHub();

/** The fake refuses a REST request without the pinned API version, as the client sends it. */
const VERSION = { 'x-github-api-version': '2022-11-28' };
const get = (path: string, headers: Record<string, string> = {}) =>
  fetch(`${fake.url}${path}`, { headers: { ...VERSION, ...headers } });

describe('event feeds', () => {
  it('serves newest first with ETag, X-Poll-Interval, Link and 304 that costs nothing', async () => {
    const evs = Array.from({ length: 5 }, () => pushEvent());
    fake.addEvents('public', evs);
    fake.setPollInterval('public', 120);

    const r1 = await get('/events?per_page=2&page=1');
    expect(r1.status).toBe(200);
    const page = (await r1.json()) as { id: string }[];
    expect(page.map((e) => e.id)).toEqual([evs[4]!.id, evs[3]!.id]);
    expect(r1.headers.get('x-poll-interval')).toBe('120');
    expect(r1.headers.get('link')).toContain('rel="next"');
    const etag = r1.headers.get('etag')!;
    expect(etag).toMatch(/^W\/".+"$/);
    expect(r1.headers.get('x-ratelimit-remaining')).toBe('59');

    const r2 = await get('/events?per_page=2&page=1', { 'if-none-match': etag });
    expect(r2.status).toBe(304);
    expect(r2.headers.get('x-ratelimit-remaining')).toBe('59');
    expect(fake.countedRequests).toBe(1);

    fake.addEvents('public', [pushEvent()]);
    const r3 = await get('/events?per_page=2&page=1', { 'if-none-match': etag });
    expect(r3.status).toBe(200);
    expect(r3.headers.get('etag')).not.toBe(etag);
    expect(fake.requests.map((r) => r.headers['if-none-match'] ?? null)).toEqual([
      null,
      etag,
      etag,
    ]);
  });

  it('files public events under their repo, actor and org feeds', async () => {
    const ev = pushEvent({
      actor: { id: 7, login: 'dependabot[bot]' },
      repo: { id: 9, name: 'acme/widgets' },
      org: { id: 3, login: 'acme' },
    });
    fake.addEvents('public', [ev, otherEvent('WatchEvent')]);
    for (const path of [
      '/repos/acme/widgets/events',
      '/users/dependabot%5Bbot%5D/events',
      '/orgs/acme/events',
    ]) {
      const r = await get(path);
      expect(r.status, path).toBe(200);
      expect(((await r.json()) as { id: string }[]).map((e) => e.id)).toEqual([ev.id]);
    }
  });

  it('only the newest 300 events are reachable; past them is a 422', async () => {
    fake.addEvents(
      'public',
      Array.from({ length: 350 }, () => pushEvent()),
    );
    const p3 = await get('/events?per_page=100&page=3');
    expect(((await p3.json()) as unknown[]).length).toBe(100);
    expect(p3.headers.get('link')).toBeNull();
    expect((await get('/events?per_page=100&page=4')).status).toBe(422);
    expect((await get('/events?per_page=30&page=11')).status).toBe(422);
  });
});

describe('profiles', () => {
  it('serves users with [bot] logins, 404 for unknown, 301 for a renamed repo', async () => {
    fake.setUser(userProfile({ id: 49699333, login: 'dependabot[bot]' }));
    const u = await get('/users/dependabot%5Bbot%5D');
    expect(u.status).toBe(200);
    expect(((await u.json()) as { type: string }).type).toBe('Bot');
    expect((await get('/users/nobody')).status).toBe(404);

    fake.setRepo(repoProfile({ id: 42, full_name: 'old/name' }));
    fake.renameRepo('old/name', 'new/name');
    const moved = await fetch(`${fake.url}/repos/old/name`, {
      redirect: 'manual',
      headers: VERSION,
    });
    expect(moved.status).toBe(301);
    expect(moved.headers.get('location')).toBe(`${fake.url}/repositories/42`);
    const followed = await get('/repos/old/name');
    expect(followed.url).toBe(`${fake.url}/repositories/42`);
    expect(((await followed.json()) as { full_name: string }).full_name).toBe('new/name');
    expect((await get('/repos/new/name')).status).toBe(200);
  });
});

describe('rate limits and faults', () => {
  it('answers 403 at remaining 0, with the documented headers', async () => {
    fake.setRateLimit({ limit: 60, remaining: 1, resetAt: new Date(Date.now() + 600_000) });
    expect((await get('/events')).status).toBe(200);
    const r = await get('/events');
    expect(r.status).toBe(403);
    expect(r.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(Number(r.headers.get('x-ratelimit-reset'))).toBeGreaterThan(Date.now() / 1000);
    expect(fake.countedRequests).toBe(1);
  });

  it('uses the 5000/h bucket for a token', async () => {
    const r = await get('/events', { authorization: 'token abc' });
    expect(r.headers.get('x-ratelimit-limit')).toBe('5000');
    expect(fake.rateLimit({ token: 'abc' }).remaining).toBe(4999);
    expect(fake.rateLimit().remaining).toBe(60);
  });

  it('answers concurrent requests with a secondary-limit 403', async () => {
    fake.fail({ path: '/events', delayMs: 200 });
    const [a, b] = await Promise.all([
      get('/events'),
      new Promise((r) => setTimeout(r, 50)).then(() => get('/users/x')),
    ]);
    expect(a.status).toBe(200);
    expect(b.status).toBe(403);
    expect(b.headers.get('retry-after')).toBe('60');
    expect(fake.maxInFlight).toBe(2);
    expect(fake.secondaryLimitHits).toBe(1);
  });

  it('injects statuses, raw bodies and connection resets', async () => {
    fake.fail({ path: /^\/events/, status: 502, times: 2 });
    fake.fail({ path: '/events', body: '[{"id": "1", "ty', status: 200 });
    fake.fail({ path: '/events', reset: true });
    expect((await get('/events')).status).toBe(502);
    expect((await get('/events?page=1')).status).toBe(502);
    expect(await (await get('/events')).text()).toBe('[{"id": "1", "ty');
    await expect(get('/events')).rejects.toThrow();
    expect((await get('/events')).status).toBe(200);
  });
});

describe('the CLI starter', () => {
  const starter = (args: string[]) =>
    spawnSync(process.execPath, ['test/support/fake-github-server.ts', ...args], {
      encoding: 'utf8',
      timeout: 60_000,
    });

  it('--help prints its usage and exits 0; a bad option or number exits 2 naming it', () => {
    const help = starter(['--help']);
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^Usage: node test\/support\/fake-github-server\.ts/);
    expect(help.stdout).toContain('--seed FILE|demo');
    const port = starter(['--port', 'eighty']);
    expect(port.status).toBe(2);
    expect(port.stderr).toBe('fake-github-server: --port must be a whole number, got "eighty"\n');
    const unknown = starter(['--nope']);
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toMatch(/^fake-github-server: Unknown option '--nope'/);
    expect(unknown.stderr).toContain('Usage:');
  });

  it('prints its URL as one JSON line and serves the demo seed', async () => {
    const child = spawn(
      process.execPath,
      ['test/support/fake-github-server.ts', '--seed', 'demo'],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    try {
      const line = await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout! }).once('line', resolve);
        child.once('exit', (code) => reject(new Error(`exited ${code}`)));
      });
      const { url } = JSON.parse(line) as { url: string };
      const page = (await (
        await fetch(`${url}/events?per_page=100`, { headers: VERSION })
      ).json()) as { type: string }[];
      expect(page.filter((e) => e.type === 'PushEvent')).toHaveLength(12);
      // Dated now: the minutes before the server started, so coverage, the charts and
      // "pushed in the last 24h" show the demo's pushes.
      const dates = (page as unknown as { created_at: string }[]).map((e) =>
        Date.parse(e.created_at),
      );
      for (const at of dates) {
        expect(at).toBeLessThanOrEqual(Date.now());
        expect(at).toBeGreaterThan(Date.now() - 3_600_000);
      }
      expect((await fetch(`${url}/users/dependabot%5Bbot%5D`, { headers: VERSION })).status).toBe(
        200,
      );
      // Every push of the demo has a graph behind it: GraphQL finds its head, REST compare
      // answers its range.
      const pushes = page.filter((e) => e.type === 'PushEvent') as unknown as {
        repo: { name: string };
        payload: { before: string; head: string };
      }[];
      for (const p of pushes) {
        const [owner, name] = p.repo.name.split('/');
        const r = await fetch(`${url}/graphql`, {
          method: 'POST',
          headers: { authorization: 'bearer demo-token' },
          body: JSON.stringify({
            query:
              'query($o: String!, $n: String!, $h: GitObjectID!) { repository(owner: $o, name: $n) { object(oid: $h) { oid } } }',
            variables: { o: owner, n: name, h: p.payload.head },
          }),
        });
        expect(r.headers.get('x-ratelimit-resource')).toBe('graphql');
        const body = (await r.json()) as { data: { repository: { object: { oid: string } } } };
        expect(body.data.repository.object.oid).toBe(p.payload.head);
        if (!/^0+$/.test(p.payload.before)) {
          const c = await fetch(
            `${url}/repos/${p.repo.name}/compare/${p.payload.before}...${p.payload.head}`,
            { headers: VERSION },
          );
          expect(c.status).toBe(200);
          expect(((await c.json()) as { total_commits: number }).total_commits).toBeGreaterThan(0);
        }
      }
    } finally {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }
  });
});
