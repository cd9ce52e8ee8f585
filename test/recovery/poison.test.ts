import { createHmac } from 'node:crypto';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { sourceSpec } from '../../src/platform/config/source-spec.ts';
import { jsonInteger } from '../../src/platform/json/exact.ts';
import { pollSource } from '../../src/poll/poll-source.ts';
import { addSource } from '../../src/store/sources.ts';
import { useTestDatabase } from '../support/db.ts';
import { rawEvent } from '../support/fake-github.ts';
import { type GitHubEvent, pushEvent } from '../support/github-factories.ts';
import { expectSourceHealthy, usePoisonWorld } from '../support/poison-world.ts';
import { parsePrometheusText, sampleValue } from '../support/prometheus.ts';
import { pushPayload, TEST_WEBHOOK_SECRET } from '../support/web.ts';

/**
 * The poison corpus (docs/reliability.md "Bad input"): every case through both
 * entry points.
 *
 * Poll: a page of [good, poison, good]. The run completes, both good events are stored,
 * the poison is stored (exactly, or with unstorable free text replaced) or rejected
 * (rejected_events) with its reason — and reading the same page again adds nothing: one
 * rejected row, seen twice, the source never counting a failure.
 *
 * Webhook: the poison in a correctly signed delivery. Never a 5xx: stored (202), or
 * recorded as rejected:<reason> and answered 422, or — only for bytes that are not JSON —
 * 400 with nothing recorded. A redelivery is a duplicate, never a second row or a 5xx.
 */

const t = useTestDatabase();
const w = usePoisonWorld(t, { workerId: 'poison:1', web: true });

const big = (digits: string) => jsonInteger(digits) as unknown as number;
/** Random printable ASCII a compressor cannot shrink (the btree holds it uncompressed). */
function incompressible(bytes: number): string {
  let s = '';
  while (s.length < bytes) s += Math.random().toString(36).slice(2);
  return s.slice(0, bytes);
}
const DEEP = (levels: number) => `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;
/** JSON text of `value` with the string "__X__" replaced by raw JSON text. */
const splice = (value: unknown, raw: string) => JSON.stringify(value).replace('"__X__"', raw);
const FIVE_MB = 'x'.repeat(5 * 1024 * 1024);

type PollExpect = 'stored' | 'sanitised' | { reason: string; says: RegExp };
type HookExpect = { status: 202 } | { status: 422; reason: string } | { status: 400 };

interface PoisonCase {
  name: string;
  /** The poisoned event's JSON text, made from a valid PushEvent. */
  poll?: (ev: GitHubEvent) => string;
  pollExpect?: PollExpect;
  /** The poisoned push delivery's body, made from a valid one. */
  hook?: (body: ReturnType<typeof pushPayload>) => string | Buffer;
  hookExpect?: HookExpect;
  /** Extra checks on what was stored (poll row / webhook row). */
  check?: (row: {
    actor_id: string;
    repository_id: string;
    ref: string;
    payload: unknown;
    /** The push's repository's commit messages (a delivery's: a poll's row has none). */
    messages?: string | null;
  }) => void;
}

const pollRejected = (reason: string, says: RegExp) => ({ reason, says });
const rejected = (reason: string): HookExpect => ({ status: 422, reason });

const CORPUS: PoisonCase[] = [
  {
    name: 'created_at out of range',
    poll: (ev) => JSON.stringify({ ...ev, created_at: '+275760-09-13T00:00:00.001Z' }),
    pollExpect: pollRejected('bad_timestamp', /created_at must be an ISO 8601 timestamp/),
    // Webhooks date a push by repository.pushed_at; 1e13 s fits nothing: the arrival dates it.
    hook: (b) => JSON.stringify({ ...b, repository: { ...b.repository, pushed_at: 1e13 } }),
    hookExpect: { status: 202 },
  },
  {
    name: 'created_at that is not a calendar date',
    poll: (ev) => JSON.stringify({ ...ev, created_at: '2026-02-30T00:00:00Z' }),
    pollExpect: pollRejected('bad_timestamp', /created_at/),
  },
  {
    name: 'missing actor / sender',
    poll: (ev) => JSON.stringify({ ...ev, actor: undefined }),
    pollExpect: pollRejected('malformed', /^actor is missing$/),
    hook: (b) => JSON.stringify({ ...b, sender: undefined }),
    hookExpect: rejected('malformed'),
  },
  {
    name: 'non-numeric id',
    poll: (ev) => JSON.stringify({ ...ev, repo: { ...ev.repo, id: 'abc' } }),
    pollExpect: pollRejected('bad_id', /^repo\.id must be a numeric id/),
    hook: (b) => JSON.stringify({ ...b, sender: { ...b.sender, id: 'abc' } }),
    hookExpect: rejected('bad_id'),
  },
  {
    name: 'a 64-bit id beyond 2^53 as a JSON number (kept exactly)',
    poll: (ev) => JSON.stringify({ ...ev, actor: { ...ev.actor, id: big('9999999999999999') } }),
    pollExpect: 'stored',
    hook: (b) =>
      JSON.stringify({ ...b, repository: { ...b.repository, id: big('9999999999999999') } }),
    hookExpect: { status: 202 },
    check: (row) => expect([row.actor_id, row.repository_id]).toContain('9999999999999999'),
  },
  {
    name: 'the largest bigint id, as a string',
    poll: (ev) => JSON.stringify({ ...ev, actor: { ...ev.actor, id: '9223372036854775807' } }),
    pollExpect: 'stored',
    hook: (b) => JSON.stringify({ ...b, sender: { ...b.sender, id: '9223372036854775807' } }),
    hookExpect: { status: 202 },
    check: (row) => expect(row.actor_id).toBe('9223372036854775807'),
  },
  {
    name: 'an id beyond bigint',
    poll: (ev) => JSON.stringify({ ...ev, actor: { ...ev.actor, id: big('9223372036854775808') } }),
    pollExpect: pollRejected('bad_id', /0 to 2\^63-1 \(got 9223372036854775808\)/),
    hook: (b) =>
      JSON.stringify({ ...b, repository: { ...b.repository, id: big('18446744073709551616') } }),
    hookExpect: rejected('bad_id'),
  },
  {
    name: 'a negative id',
    poll: (ev) => JSON.stringify({ ...ev, actor: { ...ev.actor, id: -5 } }),
    pollExpect: pollRejected('bad_id', /actor\.id/),
  },
  {
    name: 'a lone UTF-16 surrogate in the ref',
    poll: (ev) => JSON.stringify({ ...ev, payload: { ...ev.payload, ref: 'refs/heads/\ud800' } }),
    pollExpect: pollRejected('invalid_text', /payload\.ref contains a lone UTF-16 surrogate/),
    hook: (b) => JSON.stringify({ ...b, ref: 'refs/heads/\ud800' }),
    hookExpect: rejected('invalid_text'),
  },
  {
    name: 'NUL in the ref',
    poll: (ev) => JSON.stringify({ ...ev, payload: { ...ev.payload, ref: 'refs/heads/a\u0000' } }),
    pollExpect: pollRejected('invalid_text', /payload\.ref contains a NUL/),
    hook: (b) => JSON.stringify({ ...b, ref: 'refs/heads/a\u0000' }),
    hookExpect: rejected('invalid_text'),
  },
  {
    name: 'NUL in the repository name',
    poll: (ev) => JSON.stringify({ ...ev, repo: { ...ev.repo, name: 'own\u0000er/repo' } }),
    pollExpect: pollRejected('invalid_text', /repo\.name contains a NUL/),
    hook: (b) =>
      JSON.stringify({ ...b, repository: { ...b.repository, full_name: 'own\u0000er/repo' } }),
    hookExpect: rejected('invalid_text'),
  },
  {
    name: 'a 3 KB incompressible ref (beyond the btree row limit)',
    poll: (ev) =>
      JSON.stringify({
        ...ev,
        payload: { ...ev.payload, ref: `refs/heads/${incompressible(3000)}` },
      }),
    pollExpect: pollRejected('too_long', /payload\.ref is 3011 bytes long \(at most 1024\)/),
    hook: (b) => JSON.stringify({ ...b, ref: `refs/heads/${incompressible(3000)}` }),
    hookExpect: rejected('too_long'),
  },
  {
    name: 'an incompressible ref at the cap (1,024 bytes) and 128-byte shas',
    poll: (ev) =>
      JSON.stringify({
        ...ev,
        payload: {
          ...ev.payload,
          ref: `refs/heads/${incompressible(1013)}`,
          head: incompressible(128),
          before: incompressible(128),
        },
      }),
    pollExpect: 'stored',
    hook: (b) =>
      JSON.stringify({
        ...b,
        ref: `refs/heads/${incompressible(1013)}`,
        after: incompressible(128),
        before: incompressible(128),
      }),
    hookExpect: { status: 202 },
    check: (row) => expect(Buffer.byteLength(row.ref)).toBe(1024),
  },
  {
    name: 'a head longer than any sha',
    poll: (ev) => JSON.stringify({ ...ev, payload: { ...ev.payload, head: 'f'.repeat(200) } }),
    pollExpect: pollRejected('too_long', /payload\.head is 200 bytes long/),
    hook: (b) => JSON.stringify({ ...b, after: 'f'.repeat(200) }),
    hookExpect: rejected('too_long'),
  },
  {
    name: 'a 20,000-level nested object',
    poll: (ev) => splice({ ...ev, payload: { ...ev.payload, deep: '__X__' } }, DEEP(20_000)),
    pollExpect: pollRejected('too_deep', /nested deeper than 64 levels/),
    hook: (b) => splice({ ...b, deep: '__X__' }, DEEP(20_000)),
    hookExpect: rejected('too_deep'),
  },
  {
    name: 'a 20,000-level nested object beside a 64-bit id (the exact parser falls back per event)',
    poll: (ev) =>
      splice(
        {
          ...ev,
          actor: { ...ev.actor, id: big('9999999999999999') },
          payload: { ...ev.payload, deep: '__X__' },
        },
        DEEP(20_000),
      ),
    pollExpect: pollRejected('too_deep', /nested deeper than 64 levels/),
    hook: (b) =>
      splice(
        { ...b, sender: { ...b.sender, id: big('9999999999999999') }, deep: '__X__' },
        DEEP(20_000),
      ),
    hookExpect: rejected('too_deep'),
  },
  {
    // 2.8 million `{}` in 8 MB cost ~260 MB once built; refused before parsing.
    name: '300,000 empty objects in the payload',
    poll: (ev) =>
      splice({ ...ev, payload: { ...ev.payload, wide: '__X__' } }, `[${'{},'.repeat(299_999)}{}]`),
    pollExpect: pollRejected('too_wide', /holds more than 250000 values/),
    hook: (b) => splice({ ...b, wide: '__X__' }, `[${'{},'.repeat(299_999)}{}]`),
    hookExpect: rejected('too_wide'),
  },
  {
    // Found by the property test: the id was serialized for the record and overflowed
    // (the record of the event still reads its id: nothing may serialize it).
    name: 'an id that is 3,000 nested arrays',
    poll: (ev) => splice({ ...ev, id: '__X__' }, `${'['.repeat(3000)}1${']'.repeat(3000)}`),
    pollExpect: pollRejected('too_deep', /^id(\[0\])+ is nested deeper than 64 levels/),
  },
  {
    name: 'nesting under the limit (50 levels)',
    poll: (ev) => splice({ ...ev, payload: { ...ev.payload, deep: '__X__' } }, DEEP(50)),
    pollExpect: 'stored',
  },
  {
    name: 'NUL and a lone surrogate in free text',
    poll: (ev) =>
      JSON.stringify({ ...ev, payload: { ...ev.payload, note: 'a\u0000b\udc00c', 'k\u0000': 1 } }),
    pollExpect: 'sanitised',
    hook: (b) =>
      JSON.stringify({ ...b, commits: [{ ...b.commits[0]!, message: 'a\u0000b\udc00c' }] }),
    hookExpect: { status: 202 },
    // A poll's note stays in the payload; a delivery's commits are stored in `commits`, and
    // the payload keeps no copy of them (ADR 0199).
    check: (row) =>
      expect(`${JSON.stringify(row.payload)} ${row.messages ?? ''}`).toContain('a\ufffdb\ufffdc'),
  },
  {
    name: 'a "__proto__" key in the payload (data, not a prototype)',
    poll: (ev) => JSON.stringify(ev).replace('"payload":{', '"payload":{"__proto__":{"x":1},'),
    pollExpect: 'stored',
    check: (row) => expect(Object.hasOwn(row.payload as object, '__proto__')).toBe(true),
  },
  {
    name: 'an event that is not an object',
    poll: () => '42',
    pollExpect: pollRejected('not_an_object', /event must be a JSON object/),
    hook: () => '[1,2,3]',
    hookExpect: rejected('not_an_object'),
  },
  {
    name: 'an event without an id (keyed by its hash)',
    poll: (ev) => JSON.stringify({ ...ev, id: undefined }),
    pollExpect: pollRejected('malformed', /^id is missing$/),
  },
  {
    name: 'a type that is not a string',
    poll: (ev) => JSON.stringify({ ...ev, type: 5 }),
    pollExpect: pollRejected('malformed', /^type must be a string/),
  },
  {
    name: 'a size that does not fit an integer column',
    poll: (ev) => JSON.stringify({ ...ev, payload: { ...ev.payload, size: 1e10 } }),
    pollExpect: pollRejected('malformed', /payload\.size must be a count/),
  },
  {
    name: 'commits that are not an array',
    hook: (b) => JSON.stringify({ ...b, commits: { a: 1 } }),
    hookExpect: rejected('malformed'),
  },
  {
    name: 'a 5 MB string',
    poll: (ev) => JSON.stringify({ ...ev, payload: { ...ev.payload, note: FIVE_MB } }),
    pollExpect: 'stored',
    hook: (b) => JSON.stringify({ ...b, commits: [{ ...b.commits[0]!, message: FIVE_MB }] }),
    hookExpect: { status: 202 },
  },
  {
    name: 'bytes that are not JSON',
    hook: () => '{"ref": "refs/heads/main", ',
    hookExpect: { status: 400 },
  },
  {
    name: 'bytes that are not UTF-8 (signed over the raw bytes)',
    hook: (b) =>
      Buffer.concat([
        Buffer.from(JSON.stringify(b).slice(0, -1)),
        Buffer.from(',"x":"\xff\xfe"}', 'latin1'),
      ]),
    hookExpect: { status: 400 },
  },
];

let n = 0;

describe('poison corpus: polled', () => {
  for (const c of CORPUS.filter((x) => x.poll)) {
    const e = c.pollExpect!;
    const what = typeof e === 'string' ? e : `rejected (${e.reason})`;
    it(`${c.name}: ${what}; good events stored; re-read adds nothing`, {
      timeout: 180_000,
    }, async () => {
      const i = n++;
      const name = `poison/poll-${i}`;
      const { source } = await addSource(t.db, sourceSpec('repo', name), 'live');
      const repo = { id: 800_000 + i, name };
      const [good1, bad, good2] = [0, 1, 2].map((k) =>
        pushEvent({ repo, actor: { id: 810_000 + 10 * i + k, login: `p${i}-${k}` } }),
      ) as [GitHubEvent, GitHubEvent, GitHubEvent];
      w.fake.addEvents(`repo:${name}`, [good1, rawEvent(c.poll!(bad), bad.id), good2]);

      const first = await pollSource(w.deps, Number(source.id));
      expect(first.outcome, JSON.stringify(first.error)).toBe('completed');

      // Read the same page again (no ETag): nothing new, the poison recorded once.
      await sql`UPDATE event_sources SET etag = NULL WHERE id = ${source.id}`.execute(t.db);
      const again = await pollSource(w.deps, Number(source.id), { force: true });
      expect(again.outcome).toBe('completed');
      expect(again.eventsCreated).toBe(0);

      const rows = await sql<{
        id: string;
        actor_id: string;
        repository_id: string;
        ref: string;
        payload: unknown;
      }>`SELECT id::text, actor_id::text, repository_id::text, ref, payload FROM push_events
         WHERE source_id = ${source.id} ORDER BY id`.execute(t.db);
      const quarantined = await sql<{
        reason: string;
        message: string;
        seen_count: number;
        event_id: string | null;
        raw_exact: boolean;
      }>`
        SELECT reason, message, seen_count, event_id, raw_exact FROM rejected_events
        WHERE source_id = ${source.id}`.execute(t.db);
      const ids = rows.rows.map((r) => r.id);
      expect(ids).toContain(good1.id);
      expect(ids).toContain(good2.id);
      await expectSourceHealthy(t, source.id);

      if (typeof e === 'string') {
        expect(ids).toEqual([good1.id, bad.id, good2.id].sort());
        expect(quarantined.rows).toEqual([]);
        expect(first.eventsRejected).toBe(0);
        c.check?.(rows.rows.find((r) => r.id === bad.id)!);
      } else {
        expect(ids).toEqual([good1.id, good2.id].sort());
        expect(first.eventsRejected).toBe(1);
        expect(quarantined.rows).toHaveLength(1);
        expect(quarantined.rows[0]).toMatchObject({ reason: e.reason, seen_count: 2 });
        expect(quarantined.rows[0]!.message).toMatch(e.says);
        const logged = w.logLines
          .map((l) => JSON.parse(l))
          .filter((l) => l.event === 'event.rejected' && l.source_id === source.id);
        expect(logged).toHaveLength(1);
      }
    });
  }
});

/** POSTs a body signed over its exact bytes. */
async function post(deliveryId: string, body: string | Buffer, event = 'push') {
  const bytes = typeof body === 'string' ? Buffer.from(body) : body;
  const signature = `sha256=${createHmac('sha256', TEST_WEBHOOK_SECRET).update(bytes).digest('hex')}`;
  const res = await fetch(`${w.web.url}/webhooks/github`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-github-event': event,
      'x-github-delivery': deliveryId,
      'x-hub-signature-256': signature,
    },
    body: bytes,
  });
  const text = await res.text();
  return { status: res.status, json: JSON.parse(text) as Record<string, unknown> };
}

describe('poison corpus: delivered by webhook', () => {
  for (const c of CORPUS.filter((x) => x.hook)) {
    const e = c.hookExpect!;
    const what = e.status === 422 ? `422 rejected:${e.reason}` : String(e.status);
    it(`${c.name}: ${what}, never a 5xx; a redelivery is a duplicate`, {
      timeout: 180_000,
    }, async () => {
      const i = n++;
      const payload = pushPayload({ repositoryId: 900_000 + i, senderId: 910_000 + i });
      const body = c.hook!(payload);
      const deliveryId = `poison-${i}`;
      const res = await post(deliveryId, body);
      expect(res.status, JSON.stringify(res.json).slice(0, 300)).toBe(e.status);

      const recorded = await sql<{ routing: string; detail: string | null }>`
        SELECT routing, detail FROM webhook_deliveries WHERE delivery_id = ${deliveryId}`.execute(
        t.db,
      );
      const pushes = await sql<{
        actor_id: string;
        repository_id: string;
        ref: string;
        payload: unknown;
        messages: string | null;
      }>`
        SELECT actor_id::text, repository_id::text, ref, payload,
          (SELECT string_agg(c.message, '|') FROM commits c
           WHERE c.repository_id = push_events.repository_id) AS messages
        FROM push_events
        WHERE head = ${payload.after} OR actor_id = ${String(payload.sender.id)}`.execute(t.db);
      if (e.status === 202) {
        expect(recorded.rows).toEqual([{ routing: 'push:created', detail: null }]);
        expect(pushes.rows).toHaveLength(1);
        c.check?.(pushes.rows[0]!);
      } else if (e.status === 422) {
        expect(recorded.rows).toMatchObject([{ routing: `rejected:${e.reason}` }]);
        expect(res.json).toMatchObject({ routing: `rejected:${e.reason}`, recorded: true });
        expect(pushes.rows).toEqual([]);
      } else {
        expect(recorded.rows).toEqual([]);
        expect(pushes.rows).toEqual([]);
        return;
      }
      const again = await post(deliveryId, body);
      expect(again.status).toBe(e.status === 202 ? 200 : 422);
      expect(again.json).toMatchObject({ duplicate: true });
    });
  }

  it('a redelivery with a different body: answered as a duplicate, logged, counted', async () => {
    const first = pushPayload();
    expect((await post('poison-mismatch', JSON.stringify(first))).status).toBe(202);
    const other = { ...first, ref: 'refs/heads/other' };
    const again = await post('poison-mismatch', JSON.stringify(other));
    expect(again).toEqual({ status: 200, json: { ok: true, duplicate: true, mismatch: true } });
    const row = await sql<{ redeliveries: number; redelivery_mismatches: number }>`
      SELECT redeliveries, redelivery_mismatches FROM webhook_deliveries
      WHERE delivery_id = 'poison-mismatch'`.execute(t.db);
    expect(row.rows).toEqual([{ redeliveries: 1, redelivery_mismatches: 1 }]);
    const logged = w.web.logs
      .map((l) => JSON.parse(l))
      .filter((l) => l.event === 'webhook.redelivery_mismatch');
    expect(logged).toMatchObject([{ delivery_id: 'poison-mismatch' }]);
    const metrics = parsePrometheusText(await (await fetch(`${w.web.url}/metrics`)).text());
    expect(
      sampleValue(metrics, 'gpi_webhook_redeliveries_total', { body: 'different' }),
    ).toBeGreaterThanOrEqual(1);
  });

  it('event names are bounded: a made-up one is recorded as ignored:other; an 8 KB one is refused', async () => {
    const made = await post('poison-made-up', JSON.stringify({ zen: 'x' }), 'made_up_event');
    expect(made).toEqual({ status: 200, json: { ok: true, routing: 'ignored:other' } });
    const huge = await post('poison-huge-event', JSON.stringify({ zen: 'x' }), 'x'.repeat(8192));
    expect(huge.status).toBe(400);
    const metrics = await (await fetch(`${w.web.url}/metrics`)).text();
    expect(metrics).not.toContain('made_up_event');
    expect(metrics).not.toContain('x'.repeat(100));
  });
});
