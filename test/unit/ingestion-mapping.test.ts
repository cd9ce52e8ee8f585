import { describe, expect, it } from 'vitest';
import { MalformedEvent, mapEventsPage } from '../../src/ingestion/mapping.ts';

// A PushEvent as api.github.com serves it today (payload trimmed to what GitHub documents
// for github.com: repository_id, push_id, ref, head, before).
function pushEvent(overrides: Record<string, unknown> = {}) {
  return {
    id: '22249084964',
    type: 'PushEvent',
    actor: {
      id: 583231,
      login: 'octocat',
      display_login: 'octocat',
      url: 'https://api.github.com/users/octocat',
    },
    repo: {
      id: 1296269,
      name: 'octocat/Hello-World',
      url: 'https://api.github.com/repos/octocat/Hello-World',
    },
    payload: {
      repository_id: 1296269,
      push_id: 10115855396,
      ref: 'refs/heads/master',
      head: '7a8f3ac80e2ad2f6842cb86f576d4bfe2c03e300',
      before: '883efe034920928c47fe18598c01249d1a9fdabd',
    },
    public: true,
    created_at: '2022-06-09T12:47:28Z',
    ...overrides,
  };
}

function failure(data: unknown): string {
  try {
    mapEventsPage(data, '/events?per_page=100&page=1');
  } catch (err) {
    expect(err).toBeInstanceOf(MalformedEvent);
    return (err as MalformedEvent).message;
  }
  throw new Error('expected MalformedEvent');
}

describe('mapEventsPage', () => {
  it('maps a PushEvent and counts other types without storing them', () => {
    const page = mapEventsPage(
      [
        pushEvent(),
        { id: '22249084965', type: 'WatchEvent', actor: { id: 1, login: 'x' } },
        { id: 22249084966, type: 'WatchEvent' },
      ],
      '/events',
    );
    expect(page.eventIds).toEqual(['22249084964', '22249084965', '22249084966']);
    expect(page.otherTypes).toEqual({ WatchEvent: 2 });
    expect(page.pushes).toEqual([
      {
        id: '22249084964',
        actor: { id: 583231, login: 'octocat' },
        repository: { id: 1296269, fullName: 'octocat/Hello-World' },
        pushId: 10115855396,
        ref: 'refs/heads/master',
        head: '7a8f3ac80e2ad2f6842cb86f576d4bfe2c03e300',
        before: '883efe034920928c47fe18598c01249d1a9fdabd',
        createdAt: new Date('2022-06-09T12:47:28Z'),
        payload: pushEvent().payload,
        size: null,
        distinctSize: null,
      },
    ]);
  });

  it('keeps size, distinct_size and commits when present (GHES, webhooks)', () => {
    const commits = [{ sha: 'abc', message: 'fix' }];
    const [push] = mapEventsPage(
      [pushEvent({ payload: { ...pushEvent().payload, size: 1, distinct_size: 1, commits } })],
      '/events',
    ).pushes;
    expect(push).toMatchObject({ size: 1, distinctSize: 1, payload: { commits } });
  });

  it('accepts an empty page', () => {
    expect(mapEventsPage([], '/events')).toEqual({ eventIds: [], pushes: [], otherTypes: {} });
  });

  it.each([
    [
      'a missing actor',
      [pushEvent({ actor: undefined })],
      /event #0 \(id 22249084964\): actor is missing/,
    ],
    [
      'a string event id',
      [pushEvent({ id: 'abc' })],
      /event #0: id must be a numeric id \(got "abc"\)/,
    ],
    [
      'a non-numeric actor id',
      [pushEvent({ actor: { id: 'abc', login: 'x' } })],
      /actor\.id must be a numeric id/,
    ],
    [
      'a fractional repo id',
      [pushEvent({ repo: { id: 1.5, name: 'a/b' } })],
      /repo\.id must be a numeric id/,
    ],
    ['a missing login', [pushEvent({ actor: { id: 1 } })], /actor\.login is missing/],
    [
      'a repo name without owner',
      [pushEvent({ repo: { id: 1, name: 'Hello-World' } })],
      /repo\.name must be OWNER\/NAME/,
    ],
    [
      'a missing head',
      [pushEvent({ payload: { ref: 'refs/heads/x', before: 'b' } })],
      /payload\.head is missing/,
    ],
    [
      'a bad created_at',
      [pushEvent({ created_at: 'yesterday' })],
      /created_at must be an ISO 8601 timestamp/,
    ],
    ['an event without type', [{ id: '1' }], /event #0: type is missing/],
    ['a non-object event', ['PushEvent'], /event #0: event must be object/],
    [
      'an object instead of an array',
      { message: 'Not Found' },
      /expected a JSON array of events, got object/,
    ],
    ['null', null, /got null/],
  ])('refuses %s', (_what, data, says) => {
    expect(failure(data)).toMatch(says);
  });

  it('names the bad event by position when the rest of the page is fine', () => {
    expect(failure([pushEvent(), pushEvent({ id: '2', actor: null })])).toMatch(
      /event #1 \(id 2\): actor must be object/,
    );
  });
});
