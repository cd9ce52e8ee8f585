import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { sourceSpec } from '../../src/platform/config/source-spec.ts';
import { pollSource } from '../../src/poll/poll-source.ts';
import { addSource } from '../../src/store/sources.ts';
import { useTestDatabase } from '../support/db.ts';
import { rawEvent } from '../support/fake-github.ts';
import { type GitHubEvent, sha } from '../support/github-factories.ts';
import { expectSourceHealthy, usePoisonWorld } from '../support/poison-world.ts';

/**
 * Property: take a real events page (the fixture of GET /events), poison one to
 * three of its events at random — any JSON value, strings with NUL or lone surrogates,
 * integers beyond 64 bits, deep nesting, long text, deleted fields, whole events replaced —
 * and poll it through the real client, parser, runner and Postgres. Whatever the poison:
 * nothing escapes as an exception, the run completes (no run fails for content), every
 * event left untouched is stored, every rejected event is recorded once (a re-read of the
 * same page adds nothing), and the source counts no failure.
 */

const t = useTestDatabase();
const w = usePoisonWorld(t, { workerId: 'poison-property:1', logLevel: 'silent' });

const PAGE: GitHubEvent[] = JSON.parse(
  readFileSync(
    new URL('../fixtures/github/get/events__page-1_per_page-100.json', import.meta.url),
    'utf8',
  ),
).body;

/** Where poison goes: the fields every rule looks at, and a few it should not care about. */
const PATHS: string[][] = [
  [],
  ['id'],
  ['type'],
  ['actor'],
  ['actor', 'id'],
  ['actor', 'login'],
  ['repo'],
  ['repo', 'id'],
  ['repo', 'name'],
  ['created_at'],
  ['payload'],
  ['payload', 'ref'],
  ['payload', 'head'],
  ['payload', 'before'],
  ['payload', 'push_id'],
  ['payload', 'size'],
  ['payload', 'distinct_size'],
  ['payload', 'commits'],
  ['payload', 'note'],
  ['payload', '__proto__'],
  ['org'],
];

const deep = (levels: number, open: string, close: string) =>
  `${open.repeat(levels)}1${close.repeat(levels)}`;

/** Poison as JSON text fragments (text, so that it can be what no encoder would write). */
const fragment: fc.Arbitrary<string> = fc.oneof(
  fc.jsonValue().map((v) => JSON.stringify(v)),
  fc.string({ unit: 'binary', maxLength: 40 }).map((s) => JSON.stringify(s)),
  fc
    .tuple(fc.string({ maxLength: 5 }), fc.constantFrom('\u0000', '\ud800', '\udfff', '\ufeff'))
    .map(([s, bad]) => JSON.stringify(`refs/heads/${s}${bad}`)),
  fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }).map(String),
  fc.constantFrom('1e400', '-0', '0.5', '9007199254740993', '9223372036854775807', '1e13'),
  fc.constantFrom(
    '"+275760-09-13T00:00:00.001Z"',
    '"2026-02-30T00:00:00Z"',
    '"0000-01-01T00:00:00Z"',
    '"2026-11-29T08:00:00+25:00"',
  ),
  fc.integer({ min: 60, max: 30_000 }).map((n) => deep(n, '{"a":', '}')),
  fc.integer({ min: 60, max: 30_000 }).map((n) => deep(n, '[', ']')),
  fc.integer({ min: 200, max: 5_000 }).map((n) => JSON.stringify('r'.repeat(n))),
);

const mutation = fc.record({
  target: fc.nat(PAGE.length - 1),
  path: fc.constantFrom(...PATHS),
  op: fc.constantFrom('set', 'set', 'set', 'delete'),
  value: fragment,
});

/** The event's JSON text with the mutations applied (placeholders spliced with raw text). */
type Mutation = { target: number; path: string[]; op: string; value: string };

function poisoned(ev: GitHubEvent, muts: Mutation[]): string {
  if (muts.some((m) => m.path.length === 0 && m.op === 'set')) {
    return muts.find((m) => m.path.length === 0 && m.op === 'set')!.value;
  }
  const copy = structuredClone(ev) as unknown as Record<string, unknown>;
  const fragments: string[] = [];
  for (const m of muts) {
    if (m.path.length === 0) continue;
    let node: Record<string, unknown> = copy;
    for (const key of m.path.slice(0, -1)) {
      if (node[key] === null || typeof node[key] !== 'object') node[key] = {};
      node = node[key] as Record<string, unknown>;
    }
    const leaf = m.path.at(-1)!;
    if (m.op === 'delete') delete node[leaf];
    else {
      Object.defineProperty(node, leaf, {
        value: `__P${fragments.length}__`,
        enumerable: true,
        writable: true,
        configurable: true,
      });
      fragments.push(m.value);
    }
  }
  let text = JSON.stringify(copy);
  fragments.forEach((f, i) => {
    text = text.replace(`"__P${i}__"`, () => f);
  });
  return text;
}

let run = 0;

describe('property: poisoned real event pages', () => {
  it('never throw, never fail a run, store every untouched event, set poison aside once', {
    timeout: 300_000,
  }, async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(mutation, { minLength: 1, maxLength: 3 }), async (muts) => {
        const r = run++;
        const name = `prop/run-${r}`;
        const { source } = await addSource(t.db, sourceSpec('repo', name), 'live');
        // Fresh ids and heads per run, so runs never share an event or a push.
        const events = PAGE.map((ev, k) => {
          const copy = structuredClone(ev);
          copy.id = String(70_000_000_000 + r * 100 + k);
          if (copy.type === 'PushEvent')
            copy.payload = { ...copy.payload, head: sha(`prop-${r}-${k}`) };
          return copy;
        });
        const touched = new Set(muts.map((m) => m.target));
        const texts = events.map((ev, k) =>
          touched.has(k)
            ? poisoned(
                ev,
                muts.filter((m) => m.target === k),
              )
            : JSON.stringify(ev),
        );
        // The fixture is newest first; the fake takes arrival order (last = newest).
        w.fake.addEvents(
          `repo:${name}`,
          texts.map((text, k) => rawEvent(text, events[k]!.id)).reverse(),
        );

        const first = await pollSource(w.deps, Number(source.id));
        expect(first.outcome, JSON.stringify(first.error)).toBe('completed');
        await sql`UPDATE event_sources SET etag = NULL WHERE id = ${source.id}`.execute(t.db);
        const again = await pollSource(w.deps, Number(source.id), { force: true });
        expect(again.outcome, JSON.stringify(again.error)).toBe('completed');
        expect(again.eventsCreated).toBe(0);

        const stored = new Set(
          (
            await sql<{
              id: string;
            }>`SELECT id::text FROM push_events WHERE source_id = ${source.id}`.execute(t.db)
          ).rows.map((x) => x.id),
        );
        for (const [k, ev] of events.entries()) {
          if (!touched.has(k) && ev.type === 'PushEvent') expect(stored).toContain(ev.id);
        }
        const q = await sql<{ n: string; seen: string }>`
          SELECT count(*) AS n, coalesce(sum(seen_count), 0) AS seen FROM rejected_events
          WHERE source_id = ${source.id}`.execute(t.db);
        // Each rejected event recorded once, seen once per read of the page.
        expect(Number(q.rows[0]!.seen)).toBe(first.eventsRejected + again.eventsRejected);
        expect(first.eventsRejected).toBe(again.eventsRejected);
        expect(Number(q.rows[0]!.n)).toBeLessThanOrEqual(first.eventsRejected);
        expect(stored.size + first.eventsRejected).toBeLessThanOrEqual(events.length);
        await expectSourceHealthy(t, source.id);
      }),
      { numRuns: Number(process.env.POISON_RUNS ?? 60) },
    );
  });
});
