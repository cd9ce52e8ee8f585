import { afterEach, describe, expect, it } from 'vitest';
import { createGitHubClient } from '../../src/budget/client.ts';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { RateLimited } from '../../src/github/errors.ts';
import { routeTemplate } from '../../src/github/pacing.ts';
import type { RawResponse, Transport } from '../../src/github/transport.ts';
import { fixedClock } from '../../src/platform/clock.ts';
import { createLogger } from '../../src/platform/log.ts';
import { useTestDatabase } from '../support/db.ts';
import { testConfig } from '../support/github-client.ts';

/**
 * GitHub's secondary limit: per credential, at most 900 requests a minute
 * to one endpoint, counted by route template, spread rather than burst. The clock is the
 * test's: waiting for a slot moves it, and the transport records when each request left.
 */

const t = useTestDatabase();
const open: GitHubClient[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
});

const resetAt = () => String(Math.floor(Date.parse('2026-01-01T02:00:00Z') / 1000));

function world(
  o: {
    env?: Record<string, string>;
    answer?: (n: number) => RawResponse | null;
    /** The quota GitHub reports for a request's Authorization header (default 5,000). */
    quotaOf?: (authorization: string | null) => number;
  } = {},
) {
  const clock = fixedClock('2026-01-01T00:00:00Z');
  const sent: { at: number; path: string; authorization: string | null }[] = [];
  // Waiters for a condition on what has been sent, checked at each send: a signal to wait
  // on instead of a sleep.
  const waiters = new Set<{ until: () => boolean; resolve: () => void }>();
  const whenSent = (until: () => boolean): Promise<void> =>
    until() ? Promise.resolve() : new Promise((resolve) => waiters.add({ until, resolve }));
  const transport: Transport = {
    async send(req) {
      sent.push({
        at: clock.now().getTime(),
        path: req.path,
        authorization: req.authorization ?? null,
      });
      for (const w of waiters) {
        if (w.until()) {
          waiters.delete(w);
          w.resolve();
        }
      }
      const custom = o.answer?.(sent.length);
      if (custom) return custom;
      const quota = String(o.quotaOf?.(req.authorization ?? null) ?? 5000);
      return {
        status: 304,
        headers: {
          'x-ratelimit-limit': quota,
          'x-ratelimit-remaining': quota,
          'x-ratelimit-reset': resetAt(),
        },
        body: null,
        url: `https://api.github.test${req.path}`,
      };
    },
  };
  const gh = createGitHubClient({
    config: testConfig(t, {
      apiUrl: 'https://api.github.test',
      env: o.env,
      ...(o.env?.GITHUB_TOKENS ? { token: null } : {}),
    }),
    db: t.db,
    databaseUrl: t.url,
    logger: createLogger('silent'),
    clock,
    sleep: async (ms) => clock.advance(ms),
    transport,
  });
  open.push(gh);
  return { gh, clock, sent, whenSent };
}

/** The most requests to endpoints matching `template` in any 60 s window. */
function busiestMinute(sent: { at: number; path: string }[], template: string): number {
  const times = sent.filter((s) => routeTemplate(s.path) === template).map((s) => s.at);
  let most = 0;
  let from = 0;
  for (let i = 0; i < times.length; i++) {
    while (times[i]! - times[from]! >= 60_000) from++;
    most = Math.max(most, i - from + 1);
  }
  return most;
}

describe('route templates', () => {
  it('counts every repository feed, user and compare as one endpoint each', () => {
    expect(routeTemplate('/repos/octocat/Hello-World/events?per_page=100&page=2')).toBe(
      '/repos/{owner}/{repo}/events',
    );
    expect(routeTemplate('/repos/a/b/compare/0123abc...4567def')).toBe(
      '/repos/{owner}/{repo}/compare/{basehead}',
    );
    expect(routeTemplate('/repositories/42/compare/a...b')).toBe(
      '/repositories/{repository_id}/compare/{basehead}',
    );
    expect(routeTemplate('/repositories/42/events')).toBe('/repositories/{repository_id}/events');
    expect(routeTemplate('/users/dependabot%5Bbot%5D')).toBe('/users/{username}');
    expect(routeTemplate('/users/octocat/events/public')).toBe('/users/{username}/events/public');
    expect(routeTemplate('/orgs/github/events')).toBe('/orgs/{org}/events');
    expect(routeTemplate('/user/583231')).toBe('/user/{account_id}');
    expect(routeTemplate('/repos/a/b/commits/main')).toBe('/repos/{owner}/{repo}/commits/{ref}');
    expect(routeTemplate('/events?per_page=100')).toBe('/events');
    expect(routeTemplate('/')).toBe('/');
  });
});

describe('pacing a pool', () => {
  it('free requests go to the credential whose slot comes first, not to the one with the most room', async () => {
    // One token reports a far larger quota, so it always has the most room; 304s never spend
    // it. Choosing by room alone sent every poll to it, one spacing apart: a quarter of the
    // pool's rate (the watch bench's 45 polls/s on 16 tokens).
    const tokens = ['big', 'a', 'b', 'c'].map((k) => `ghp_pace_${k}_${Math.random()}`);
    const { gh, sent } = world({
      env: { GITHUB_TOKENS: tokens.join(',') },
      quotaOf: (auth) => (auth?.includes('ghp_pace_big') ? 10_000_000 : 5000),
    });
    const n = 200;
    for (let i = 0; i < n; i++) {
      await gh.request({ purpose: 'poll', path: `/repos/o/r${i}/events?per_page=100&page=1` });
    }
    const spacing = 60_000 / 900;
    // Four credentials, each paced on its own: n requests take about n / 4 spacings.
    const span = sent.at(-1)!.at - sent[0]!.at;
    expect(span).toBeLessThanOrEqual((n / tokens.length) * spacing + 1_000);
    const byToken = new Map<string, number>();
    for (const s of sent) byToken.set(s.authorization!, (byToken.get(s.authorization!) ?? 0) + 1);
    expect(byToken.size).toBe(tokens.length);
    for (const count of byToken.values())
      expect(count).toBeGreaterThanOrEqual(n / tokens.length - 5);
    // Still within the limit on each credential.
    for (const token of tokens) {
      const mine = sent.filter((s) => s.authorization?.includes(token));
      expect(busiestMinute(mine, '/repos/{owner}/{repo}/events')).toBeLessThanOrEqual(900);
    }
  });
});

describe('pacing one credential', () => {
  it('a burst of polls never passes 900 a minute to one endpoint, and is spread at that rate', {
    // A hang guard, not a claim: 1,100 requests, each a reservation, a gate and a settle on
    // Postgres, took 155 s beside busy loops on 2 cores.
    timeout: 600_000,
  }, async () => {
    const { gh, sent, whenSent } = world();
    const n = 1_000;
    const lookups = n / 10;
    const isFeed = (s: { path: string }) => s.path.startsWith('/repos/');
    const feedsSent = () => sent.filter(isFeed).length;
    const lookupsSent = () => sent.length - feedsSent();
    // Feeds three at a time, as pollDueSources does: every one of them a different repository.
    let next = 0;
    const feeds = async () => {
      while (next < n) {
        const i = next++;
        // A lookup every ten feeds: feed i waits for lookup ⌊i / 10⌋ − 1 to have left, so the
        // lookups never fall behind the feeds (and never wait on their last one).
        if (i >= 10) await whenSent(() => lookupsSent() >= Math.floor(i / 10));
        await gh.request({ purpose: 'poll', path: `/repos/o/r${i}/events?per_page=100&page=1` });
      }
    };
    // Another endpoint of the same credential keeps its own pace: user lookups on a line of
    // their own, each once two feeds have left since the lookup before it. Two lookups with no
    // feed between them would be one spacing of their own endpoint apart (its pace, rightly
    // held); when that happened was up to the scheduler, which is why the lookups once ran
    // inline in the feed workers and the check below failed on a loaded machine.
    const users = async () => {
      let feedsBefore = -1;
      for (let k = 0; k < lookups; k++) {
        const wanted = feedsBefore + 2;
        await whenSent(() => feedsSent() >= wanted);
        await gh.request({ purpose: 'enrich', path: `/users/u${k}` });
        feedsBefore = sent
          .slice(
            0,
            sent.findIndex((s) => s.path === `/users/u${k}`),
          )
          .filter(isFeed).length;
      }
    };
    await Promise.all([feeds(), feeds(), feeds(), users()]);
    const feedsOut = sent.filter(isFeed);
    expect(feedsOut).toHaveLength(n);
    expect(busiestMinute(sent, '/repos/{owner}/{repo}/events')).toBeLessThanOrEqual(900);
    // Spread, not a burst of 900 then a wait: no two feed requests closer than 60 s / 900.
    const gaps = feedsOut.slice(1).map((s, i) => s.at - feedsOut[i]!.at);
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(Math.floor(60_000 / 900));
    // ...and not slower than the limit allows: the whole burst took (n − 1) spacings.
    const span = feedsOut.at(-1)!.at - feedsOut[0]!.at;
    expect(span).toBeLessThan(((n - 1) * 60_000) / 900 + 1_000);
    // The user lookups were never held behind the feeds' pace: each left at once, at the
    // instant of the request before it (the clock only moves while a slot is waited for).
    const lookupsOut = sent.flatMap((s, i) =>
      s.path.startsWith('/users/') ? [[sent[i - 1]!.at, s.at]] : [],
    );
    expect(lookupsOut).toHaveLength(lookups);
    for (const [before, at] of lookupsOut) expect(at).toBe(before);
  });

  it('is set by GITHUB_ENDPOINT_RATE_PER_MINUTE, and 0 turns it off', async () => {
    const slow = world({ env: { GITHUB_ENDPOINT_RATE_PER_MINUTE: '60' } });
    for (let i = 0; i < 5; i++)
      await slow.gh.request({ purpose: 'poll', path: `/repos/o/r${i}/events` });
    const at = slow.sent.map((s) => s.at - slow.sent[0]!.at);
    expect(at).toEqual([0, 1000, 2000, 3000, 4000]);

    const off = world({ env: { GITHUB_ENDPOINT_RATE_PER_MINUTE: '0' } });
    for (let i = 0; i < 5; i++)
      await off.gh.request({ purpose: 'poll', path: `/repos/o/r${i}/events` });
    expect(new Set(off.sent.map((s) => s.at)).size).toBe(1);
  });

  it('a clock that jumped back waits at most a spacing and a second, not the jump', async () => {
    const { gh, clock, sent } = world();
    await gh.request({ purpose: 'poll', path: '/repos/o/r1/events' });
    clock.advance(-3600_000);
    const asked = clock.now().getTime();
    await gh.request({ purpose: 'poll', path: '/repos/o/r2/events' });
    expect(sent[1]!.at - asked).toBeLessThanOrEqual(Math.ceil(60_000 / 900) + 1_000);
  });

  it('a secondary-limit 403 with retry-after stops the credential until then', async () => {
    const { gh, clock, sent } = world({
      answer: (n) =>
        n === 3
          ? {
              status: 403,
              headers: { 'retry-after': '90', 'content-type': 'application/json' },
              body: JSON.stringify({ message: 'You have exceeded a secondary rate limit.' }),
              url: 'https://api.github.test/repos/o/r/events',
            }
          : null,
    });
    await gh.request({ purpose: 'poll', path: '/repos/o/r1/events' });
    await gh.request({ purpose: 'poll', path: '/repos/o/r2/events' });
    const limitedAt = clock.now().getTime();
    const err = await gh.request({ purpose: 'poll', path: '/repos/o/r3/events' }).catch((e) => e);
    expect(err).toBeInstanceOf(RateLimited);
    const retryAt = (err as RateLimited).retryAt.getTime();
    expect(retryAt - limitedAt).toBeGreaterThanOrEqual(90_000);

    const refused = await gh.tryReserve('poll');
    expect(refused).toMatchObject({ ok: false, reason: 'blocked', blockReason: 'rate_limit' });
    expect(sent).toHaveLength(3);

    clock.set(new Date(retryAt + 1));
    await gh.request({ purpose: 'poll', path: '/repos/o/r4/events' });
    expect(sent).toHaveLength(4);
  });
});
