import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { sourceSpec } from '../../src/platform/config/source-spec.ts';
import { pollSource } from '../../src/poll/poll-source.ts';
import { addSource } from '../../src/store/sources.ts';
import { useTestDatabase } from '../support/db.ts';
import { type GitHubEvent, pushEvent } from '../support/github-factories.ts';
import { usePoisonWorld } from '../support/poison-world.ts';
import { deliver, pushPayload } from '../support/web.ts';

/**
 * Bad input (contract changed by ADR 0020): what GitHub (or someone
 * posing as it) might send that is not what it documents — events without an actor or a
 * repository, ids as strings, a 5 MB event, unicode and control characters, NUL bytes
 * (which Postgres text and jsonb cannot hold), null fields. Each is either rejected with
 * a named reason (the good event beside it stored, the run completed), stored exactly
 * (the stored payload reads back equal to what was sent), or — free text Postgres cannot
 * hold — stored with that character replaced by U+FFFD; nothing crashes. Both entry
 * points: a polled feed page and a webhook delivery. The full corpus: poison.test.ts.
 */

const t = useTestDatabase();
const w = usePoisonWorld(t, { workerId: 'bad-input:1', web: true });

const FIVE_MB = 'x'.repeat(5 * 1024 * 1024);
const UNICODE = 'emoji 🚀 · RTL עברית · combining é · CJK 漢字 · line sep \u2028 · BOM \ufeff';
const CONTROLS = 'tab\t bell\u0007 esc\u001b del\u007f unit-sep\u001f cr\r lf\n';
const NUL = 'before\u0000after';

type Mutate = (ev: GitHubEvent) => unknown;
const without =
  (key: string): Mutate =>
  (ev) => {
    const copy: Record<string, unknown> = { ...ev };
    delete copy[key];
    return copy;
  };

/** Poll cases: a mutation of an otherwise valid PushEvent, and what must happen. */
const POLL_CASES: {
  name: string;
  mutate: Mutate;
  expect: 'stored' | 'sanitised' | { reason: string; says: RegExp };
}[] = [
  {
    name: 'missing actor',
    mutate: without('actor'),
    expect: { reason: 'malformed', says: /actor is missing/ },
  },
  {
    name: 'missing repo',
    mutate: without('repo'),
    expect: { reason: 'malformed', says: /repo is missing/ },
  },
  {
    name: 'null actor',
    mutate: (ev) => ({ ...ev, actor: null }),
    expect: { reason: 'malformed', says: /actor/ },
  },
  {
    name: 'null payload.ref',
    mutate: (ev) => ({ ...ev, payload: { ...ev.payload, ref: null } }),
    expect: { reason: 'malformed', says: /payload\.ref/ },
  },
  {
    name: 'null payload.size',
    mutate: (ev) => ({ ...ev, payload: { ...ev.payload, size: null } }),
    expect: { reason: 'malformed', says: /payload\.size/ },
  },
  {
    name: 'string ids that are numbers',
    mutate: (ev) => ({
      ...ev,
      actor: { ...ev.actor, id: String(ev.actor.id) },
      repo: { ...ev.repo, id: String(ev.repo.id) },
    }),
    expect: 'stored',
  },
  {
    name: 'string ids that are not numbers',
    mutate: (ev) => ({ ...ev, actor: { ...ev.actor, id: 'abc' } }),
    expect: { reason: 'bad_id', says: /actor\.id must be a numeric id/ },
  },
  {
    name: 'a 5 MB event',
    mutate: (ev) => ({ ...ev, payload: { ...ev.payload, note: FIVE_MB } }),
    expect: 'stored',
  },
  {
    name: 'unicode in login, ref and payload',
    mutate: (ev) => ({
      ...ev,
      payload: { ...ev.payload, ref: `refs/heads/${UNICODE}`, note: UNICODE },
    }),
    expect: 'stored',
  },
  {
    name: 'control characters',
    mutate: (ev) => ({
      ...ev,
      payload: { ...ev.payload, ref: `refs/heads/${CONTROLS}`, note: CONTROLS },
    }),
    expect: 'stored',
  },
  {
    // Free text: stored, the NUL (which jsonb cannot hold) replaced by U+FFFD.
    name: 'NUL in a payload string',
    mutate: (ev) => ({ ...ev, payload: { ...ev.payload, note: NUL } }),
    expect: 'sanitised',
  },
  {
    // A key column: never altered, rejected.
    name: 'NUL in a column (ref)',
    mutate: (ev) => ({ ...ev, payload: { ...ev.payload, ref: `refs/heads/${NUL}` } }),
    expect: { reason: 'invalid_text', says: /payload\.ref contains a NUL/ },
  },
];

const verdict = (e: (typeof POLL_CASES)[number]['expect']) =>
  e === 'stored'
    ? 'stored exactly'
    : e === 'sanitised'
      ? 'stored, NUL replaced'
      : `rejected (${e.reason})`;
/** What a stored payload must read back as: NUL (unstorable in jsonb) becomes U+FFFD. */
const sanitised = (v: unknown) => JSON.parse(JSON.stringify(v).replaceAll('\\u0000', '\ufffd'));

describe('bad input on a polled feed', () => {
  for (const [i, c] of POLL_CASES.entries()) {
    it(`${c.name}: ${verdict(c.expect)}`, {
      timeout: 180_000,
    }, async () => {
      const name = `bad/input-${i}`;
      const { source } = await addSource(t.db, sourceSpec('repo', name), 'live');
      const repo = { id: 600_000 + i, name };
      const good = pushEvent({ repo, actor: { id: 610_000 + i, login: `good-${i}` } });
      const bad = pushEvent({ repo, actor: { id: 620_000 + i, login: `bad-${i}` } });
      const sent = c.mutate(bad) as GitHubEvent;
      w.fake.addEvents(`repo:${name}`, [good, sent]);

      const run = await pollSource(w.deps, Number(source.id));

      const stored = await sql<{ id: string; ref: string; payload: unknown }>`
        SELECT id::text, ref, push_payload(p) AS payload FROM push_events p
        WHERE repository_id = ${repo.id}
        ORDER BY id`.execute(t.db);
      // Whatever the event holds, the run completes and the source counts no failure.
      expect(run.outcome).toBe('completed');
      const rejected = await sql<{ event_id: string; reason: string; message: string }>`
        SELECT event_id, reason, message FROM rejected_events WHERE source_id = ${source.id}`.execute(
        t.db,
      );
      if (c.expect === 'stored' || c.expect === 'sanitised') {
        expect(stored.rows.map((r) => r.id)).toEqual([good.id, bad.id].sort());
        const row = stored.rows.find((r) => r.id === bad.id)!;
        // Exactly what was sent: the payload push_payload gives back (what the columns hold
        // put back into what is left of it, ADR 0199) equal, the ref column byte for byte.
        const expected = (sent as { payload: unknown }).payload;
        expect(row.payload).toEqual(c.expect === 'stored' ? expected : sanitised(expected));
        expect(row.ref).toBe((sent.payload as { ref: string }).ref);
        expect(rejected.rows).toEqual([]);
      } else {
        // The good event is stored; the bad one is rejected once, naming the field.
        expect(stored.rows.map((r) => r.id)).toEqual([good.id]);
        expect(run.eventsRejected).toBe(1);
        expect(rejected.rows).toHaveLength(1);
        expect(rejected.rows[0]).toMatchObject({ event_id: bad.id, reason: c.expect.reason });
        expect(rejected.rows[0]!.message).toMatch(c.expect.says);
        const logged = w.logLines
          .map((l) => JSON.parse(l))
          .filter((l) => l.event === 'event.rejected' && l.run_id === run.runId);
        expect(logged).toHaveLength(1);
      }
    });
  }
});

/** Webhook cases: a push delivery body and the answer it must get. */
const HOOK_CASES: {
  name: string;
  body: () => unknown;
  status: number;
  stored?: (payload: Record<string, unknown>) => void;
}[] = [
  {
    name: 'missing sender',
    body: () => ({ ...pushPayload(), sender: undefined }),
    status: 422,
  },
  {
    name: 'null repository',
    body: () => ({ ...pushPayload(), repository: null }),
    status: 422,
  },
  {
    name: 'string ids',
    body: () => {
      const p = pushPayload();
      return { ...p, sender: { ...p.sender, id: String(p.sender.id) } };
    },
    status: 202,
  },
  {
    name: 'a 5 MB commit message',
    body: () => {
      const p = pushPayload();
      return { ...p, commits: [{ ...p.commits[0]!, message: FIVE_MB }] };
    },
    status: 202,
    stored: (payload) =>
      expect((payload.commits as { message: string }[])[0]!.message).toBe(FIVE_MB),
  },
  {
    name: 'unicode and control characters',
    body: () => {
      const p = pushPayload();
      return { ...p, commits: [{ ...p.commits[0]!, message: UNICODE + CONTROLS }] };
    },
    status: 202,
    stored: (payload) =>
      expect((payload.commits as { message: string }[])[0]!.message).toBe(UNICODE + CONTROLS),
  },
  {
    // Free text: stored with the NUL replaced (jsonb cannot hold U+0000).
    name: 'NUL in a commit message',
    body: () => {
      const p = pushPayload();
      return { ...p, commits: [{ ...p.commits[0]!, message: NUL }] };
    },
    status: 202,
    stored: (payload) =>
      expect((payload.commits as { message: string }[])[0]!.message).toBe('before\ufffdafter'),
  },
];

describe('bad input in a webhook delivery', () => {
  for (const [i, c] of HOOK_CASES.entries()) {
    it(`${c.name}: answered ${c.status}`, { timeout: 30_000 }, async () => {
      const body = c.body() as ReturnType<typeof pushPayload>;
      const deliveryId = `bad-input-${i}`;
      const res = await deliver(w.web.url, { deliveryId, body: JSON.stringify(body) });
      expect(res.status, JSON.stringify(res.json)).toBe(c.status);
      const recorded = await sql<{ routing: string }>`
        SELECT routing FROM webhook_deliveries WHERE delivery_id = ${deliveryId}`.execute(t.db);
      const repoId = Number((body.repository as { id?: number } | null)?.id ?? -1);
      const stored = await sql<{ payload: Record<string, unknown> }>`
        SELECT push_payload(p) AS payload FROM push_events p WHERE repository_id = ${repoId}`.execute(
        t.db,
      );
      if (c.status === 202) {
        expect(recorded.rows).toEqual([{ routing: 'push:created' }]);
        expect(stored.rows).toHaveLength(1);
        c.stored?.(stored.rows[0]!.payload);
      } else {
        // Signed and parseable but not storable: recorded as rejected (ADR 0021), no push.
        expect(recorded.rows).toEqual([{ routing: 'rejected:malformed' }]);
        expect(stored.rows).toEqual([]);
      }
    });
  }
});
