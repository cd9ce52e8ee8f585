import { describe, expect, it } from 'vitest';
import { parseJson } from '../../src/platform/json/exact.ts';
import { MalformedEvent, mapEventsPage } from '../../src/store/mapping.ts';

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

function rejected(data: unknown[]): { reason: string; message: string; eventId: string | null } {
  const page = mapEventsPage(data, '/events?per_page=100&page=1');
  expect(page.pushes).toEqual([]);
  expect(page.rejected).toHaveLength(1);
  const [r] = page.rejected;
  return { reason: r!.reason, message: r!.message, eventId: r!.eventId };
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
    expect(page.size).toBe(3);
    expect(page.eventIds).toEqual(['22249084964', '22249084965', '22249084966']);
    expect(page.otherTypes).toEqual({ WatchEvent: 2 });
    expect(page.rejected).toEqual([]);
    expect(page.pushes).toEqual([
      {
        id: '22249084964',
        actor: { id: '583231', login: 'octocat' },
        repository: { id: '1296269', fullName: 'octocat/Hello-World' },
        org: null,
        pushId: '10115855396',
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

  it("keeps the event's org, and never sets a push aside for a placeholder or a broken one", () => {
    const org = {
      id: 9919,
      login: 'github',
      gravatar_id: '',
      url: 'https://api.github.com/orgs/github',
    };
    const pushes = mapEventsPage(
      [
        { ...pushEvent(), org },
        // GitHub's answers of 2012 carried a placeholder org with a URL only.
        { ...pushEvent(), id: '22249084970', org: { url: 'https://api.github.com/orgs/' } },
        { ...pushEvent(), id: '22249084971', org: { id: 'x', login: 'bad' } },
      ],
      '/events',
    ).pushes;
    expect(pushes.map((p) => p.org)).toEqual([{ id: '9919', login: 'github' }, null, null]);
  });

  it('accepts an empty page', () => {
    expect(mapEventsPage([], '/events')).toEqual({
      size: 0,
      eventIds: [],
      eventTimes: [],
      pushes: [],
      otherTypes: {},
      rejected: [],
      sanitised: [],
    });
  });

  it('keeps every digit of 64-bit ids that came through parseJson', () => {
    const text = JSON.stringify([pushEvent()])
      .replace('"id":583231', '"id":9999999999999999')
      .replace('"id":1296269', '"id":9223372036854775807');
    const [push] = mapEventsPage(parseJson(text) as unknown[], '/events').pushes;
    expect(push!.actor.id).toBe('9999999999999999');
    expect(push!.repository.id).toBe('9223372036854775807');
  });

  it.each([
    ['a missing actor', [pushEvent({ actor: undefined })], 'malformed', /^actor is missing$/],
    [
      'a string event id',
      [pushEvent({ id: 'abc' })],
      'bad_id',
      /^id must be a numeric id.*\(got "abc"\)/,
    ],
    [
      'a non-numeric actor id',
      [pushEvent({ actor: { id: 'abc', login: 'x' } })],
      'bad_id',
      /^actor\.id must be a numeric id/,
    ],
    [
      'a fractional repo id',
      [pushEvent({ repo: { id: 1.5, name: 'a/b' } })],
      'bad_id',
      /^repo\.id must be a numeric id/,
    ],
    [
      'an id beyond bigint',
      [pushEvent({ repo: { id: '9223372036854775808', name: 'a/b' } })],
      'bad_id',
      /^repo\.id must be a numeric id from 0 to 2\^63-1/,
    ],
    ['a missing login', [pushEvent({ actor: { id: 1 } })], 'malformed', /^actor\.login is missing/],
    [
      'a repo name without owner',
      [pushEvent({ repo: { id: 1, name: 'Hello-World' } })],
      'malformed',
      /^repo\.name must be OWNER\/NAME/,
    ],
    [
      'a missing head',
      [pushEvent({ payload: { ref: 'refs/heads/x', before: 'b' } })],
      'malformed',
      /^payload\.head is missing/,
    ],
    [
      'a bad created_at',
      [pushEvent({ created_at: 'yesterday' })],
      'bad_timestamp',
      /^created_at must be an ISO 8601 timestamp/,
    ],
    [
      'a created_at out of range',
      [pushEvent({ created_at: '0000-01-01T00:00:00Z' })],
      'bad_timestamp',
      /created_at/,
    ],
    [
      'a created_at that is not a calendar date',
      [pushEvent({ created_at: '2026-02-30T00:00:00Z' })],
      'bad_timestamp',
      /created_at/,
    ],
    ['an event without type', [{ id: '1' }], 'malformed', /^type is missing/],
    ['a non-object event', ['PushEvent'], 'not_an_object', /event must be a JSON object/],
    [
      'NUL in the ref',
      [pushEvent({ payload: { ...pushEvent().payload, ref: 'refs/heads/a\u0000b' } })],
      'invalid_text',
      /^payload\.ref contains a NUL character/,
    ],
    [
      'a lone surrogate in the ref',
      [pushEvent({ payload: { ...pushEvent().payload, ref: 'refs/heads/\ud800' } })],
      'invalid_text',
      /^payload\.ref contains a lone UTF-16 surrogate/,
    ],
    [
      'a ref longer than the index allows',
      [pushEvent({ payload: { ...pushEvent().payload, ref: `refs/heads/${'x'.repeat(3000)}` } })],
      'too_long',
      /^payload\.ref is 3011 bytes long \(at most 1024\)/,
    ],
    [
      'a size that is not a count',
      [pushEvent({ payload: { ...pushEvent().payload, size: 1e10 } })],
      'malformed',
      /^payload\.size must be a count/,
    ],
  ])('sets aside %s, naming the field', (_what, data, reason, says) => {
    const r = rejected(data);
    expect(r.reason).toBe(reason);
    expect(r.message).toMatch(says);
  });

  it('sets aside an event nested deeper than the limit, without recursion', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = { a: deep };
    expect(rejected([pushEvent({ payload: { ...pushEvent().payload, deep } })]).reason).toBe(
      'too_deep',
    );
  });

  it('sanitises free text Postgres cannot hold (NUL, lone surrogates) and stores the push', () => {
    const page = mapEventsPage(
      [pushEvent({ payload: { ...pushEvent().payload, note: 'a\u0000b\ud800c' } })],
      '/events',
    );
    expect(page.rejected).toEqual([]);
    expect(page.pushes[0]!.payload.note).toBe('a\ufffdb\ufffdc');
    expect(page.sanitised).toEqual([{ eventId: '22249084964', path: 'payload.note' }]);
  });

  it('fails the page only when it is not an array of events', () => {
    expect(() => mapEventsPage({ message: 'Not Found' }, '/events')).toThrow(MalformedEvent);
    expect(() => mapEventsPage(null, '/events')).toThrow(/got null/);
  });

  it('judges each event on its own: the good ones beside a bad one are mapped', () => {
    const page = mapEventsPage(
      [pushEvent(), pushEvent({ id: '2', actor: null }), pushEvent({ id: '3' })],
      '/events',
    );
    expect(page.pushes.map((p) => p.id)).toEqual(['22249084964', '3']);
    expect(page.eventIds).toEqual(['22249084964', '2', '3']);
    expect(page.rejected).toMatchObject([
      {
        index: 1,
        eventId: '2',
        reason: 'malformed',
        message: 'actor must be an object (got null)',
      },
    ]);
  });
});
