import type http from 'node:http';
import { type Answer, conditional, DOCS, json } from './fake-github-http.ts';
import type { GitHubEvent } from './github-factories.ts';

/**
 * The fake GitHub's event feeds (`public`, `repo:OWNER/NAME`, `org:ORG`, `user:LOGIN`):
 * newest first; `per_page` ≤ 100 (default 30); only the newest 300 events are reachable
 * and a page past them is a 422; ETag and 304; X-Poll-Interval; Link rel="next".
 */

const WINDOW = 300;

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

export function fakeFeeds(o: { pollInterval?: number }) {
  let feeds = new Map<string, GitHubEvent[]>(); // newest first
  let pollIntervals = new Map<string, number>();

  const feedOf = (key: string) => {
    let f = feeds.get(key.toLowerCase());
    if (!f) {
      f = [];
      feeds.set(key.toLowerCase(), f);
    }
    return f;
  };

  function fileEvent(key: string, ev: GitHubEvent) {
    const f = feedOf(key);
    const i = f.findIndex((e) => e.id === ev.id);
    if (i >= 0) f.splice(i, 1);
    f.unshift(ev);
  }

  return {
    serve(req: http.IncomingMessage, url: URL, key: string, baseUrl: string): Answer {
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
        'x-poll-interval': String(pollIntervals.get(key.toLowerCase()) ?? o.pollInterval ?? 60),
      };
      if (start + perPage < reachable) {
        const link = (p: number) => {
          const u = new URL(url.pathname, baseUrl);
          u.searchParams.set('per_page', String(perPage));
          u.searchParams.set('page', String(p));
          return u.toString();
        };
        const last = Math.ceil(reachable / perPage);
        headers.link = `<${link(page + 1)}>; rel="next", <${link(last)}>; rel="last"`;
      }
      return conditional(req, slice, headers, `[${slice.map(eventText).join(',')}]`);
    },
    addEvents(feed: string, events: GitHubEvent[]): void {
      for (const ev of events) {
        fileEvent(feed, ev);
        if (feed.toLowerCase() === 'public') {
          fileEvent(`repo:${ev.repo.name}`, ev);
          fileEvent(`user:${ev.actor.login}`, ev);
          if (ev.org) fileEvent(`org:${ev.org.login}`, ev);
        }
      }
    },
    feed: (feed: string): GitHubEvent[] => [...(feeds.get(feed.toLowerCase()) ?? [])],
    setPollInterval(feed: string, seconds: number): void {
      pollIntervals.set(feed.toLowerCase(), seconds);
    },
    reset(): void {
      feeds = new Map();
      pollIntervals = new Map();
    },
  };
}
