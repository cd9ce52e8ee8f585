import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMMITS_STATES, PUSH_ORIGINS, REQUEST_PURPOSES } from '../../src/platform/db/columns.ts';
import { useTestDatabase } from '../support/db.ts';
import { spendRows } from '../support/ledger-factories.ts';
import { parsePrometheusText, sampleValue } from '../support/prometheus.ts';
import { seedActivity } from '../support/status-factories.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * Every kind of row the store can hold, at once: a ledger row of every request purpose
 * (spent within the charts' hours, and one still in flight), a push in every commits state
 * and of every origin. The page, /status and /metrics answer 200 with all of them. (The
 * page answered 500 once a commit had been fetched: its chart knew only poll and enrich.)
 */
const t = useTestDatabase();
let web: TestWeb;

beforeAll(async () => {
  await seedActivity(t.db);
  for (const purpose of REQUEST_PURPOSES) {
    await spendRows(t.db, 'fixture', purpose, 3, { ageSeconds: 120 });
    await t.db
      .insertInto('github_requests')
      .values({ credential: 'fixture', purpose, path: `/in-flight/${purpose}`, outcome: 'sent' })
      .execute();
  }
  let n = 0;
  for (const state of COMMITS_STATES) {
    for (const origin of PUSH_ORIGINS) {
      n++;
      const head = n.toString(16).padStart(40, 'c');
      await t.db
        .insertInto('push_events')
        .values({
          id: String(90_000_000_000 + n),
          actor_id: '1',
          repository_id: '77',
          ref: `refs/heads/kind-${n}`,
          head,
          before: '0'.repeat(40),
          created_at: new Date(Date.now() - 3_600_000),
          payload: JSON.stringify({ head }),
          origin,
          commits_state: state,
          commits_next_attempt_at: state === 'pending' ? new Date() : null,
          commit_count: state === 'complete' || state === 'partial' ? 2 : null,
        })
        .execute();
    }
  }
  web = await startTestWeb(t);
});
afterAll(async () => {
  await web?.close();
});

async function get(path: string) {
  const res = await fetch(`${web.url}${path}`);
  return { status: res.status, text: await res.text() };
}

describe('the status surfaces with a row of every kind', () => {
  it('GET / answers 200 and charts every purpose', async () => {
    const res = await get('/');
    expect(res.status).toBe(200);
    for (const purpose of REQUEST_PURPOSES) expect(res.text).toContain(`>${purpose}<`);
  });

  it('GET /status answers 200 and counts every purpose, state and origin', async () => {
    const res = await get('/status');
    expect(res.status).toBe(200);
    const s = JSON.parse(res.text);
    for (const purpose of REQUEST_PURPOSES)
      expect(s.budget.spent[purpose]).toBeGreaterThanOrEqual(3);
    for (const state of COMMITS_STATES) {
      expect(s.commits.byState[state], state).toBeGreaterThanOrEqual(PUSH_ORIGINS.length);
    }
    for (const origin of PUSH_ORIGINS) {
      expect(s.activity.pushes[origin], origin).toBeGreaterThanOrEqual(COMMITS_STATES.length);
    }
  });

  it('GET /metrics answers 200 with a sample for every purpose, state and origin', async () => {
    const res = await get('/metrics');
    expect(res.status).toBe(200);
    const m = parsePrometheusText(res.text);
    for (const purpose of REQUEST_PURPOSES) {
      expect(sampleValue(m, 'gpi_github_requests_in_flight', { purpose }), purpose).toBe(1);
      expect(
        sampleValue(m, 'gpi_github_budget_spent', { purpose }),
        purpose,
      ).toBeGreaterThanOrEqual(3);
    }
    for (const state of COMMITS_STATES) {
      expect(sampleValue(m, 'gpi_push_commits_state', { state }), state).toBeGreaterThanOrEqual(3);
    }
    for (const origin of PUSH_ORIGINS) {
      expect(sampleValue(m, 'gpi_push_events_ingested_total', { origin }), origin).toBeGreaterThan(
        0,
      );
    }
  });
});
