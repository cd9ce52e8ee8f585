import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../support/db.ts';
import { deliver, startTestWeb, type TestWeb } from '../support/web.ts';

// GitHub's own push deliveries (@octokit/webhooks-examples, the api.github.com set): all
// seven are accepted, they are three pushes (a tag created, the tag deleted, a branch
// created with one commit), and the branch's commit is stored from the delivery itself.

interface Example {
  ref: string;
  before: string;
  after: string;
  repository: { id: number };
  commits: { id: string; message: string; author: { name: string; email: string } }[];
}

const require = createRequire(import.meta.url);
const examples = (
  require('@octokit/webhooks-examples') as { name: string; examples: Example[] }[]
).find((e) => e.name === 'push')!.examples;

const t = useTestDatabase();
let web: TestWeb;

beforeAll(async () => {
  web = await startTestWeb(t);
});
afterAll(async () => {
  await web?.close();
});

describe('@octokit/webhooks-examples push deliveries', () => {
  it('stores the three pushes with their commits and states', async () => {
    expect(examples).toHaveLength(7);
    for (const [i, body] of examples.entries()) {
      const res = await deliver(web.url, {
        deliveryId: `example-${i}`,
        body: JSON.stringify(body),
      });
      expect([200, 202]).toContain(res.status);
    }
    const pushes = await sql<{
      ref: string;
      before: string;
      head: string;
      commits_state: string;
      commit_count: number | null;
    }>`
      SELECT ref, before, head, commits_state, commit_count FROM push_events
      ORDER BY ref, before`.execute(t.db);
    const zeros = '0'.repeat(40);
    const tagged = examples[0]!.after;
    expect(pushes.rows).toEqual([
      {
        ref: 'refs/heads/master',
        before: zeros,
        head: tagged,
        commits_state: 'complete',
        commit_count: 1,
      },
      {
        ref: 'refs/tags/simple-tag',
        before: zeros,
        head: tagged,
        commits_state: 'none',
        commit_count: 0,
      },
      {
        ref: 'refs/tags/simple-tag',
        before: tagged,
        head: zeros,
        commits_state: 'none',
        commit_count: 0,
      },
    ]);

    const branch = examples.find((e) => e.ref === 'refs/heads/master')!;
    const given = branch.commits[0]!;
    const rows = await sql<Record<string, unknown>>`
      SELECT pc.position, pc.sha, pc."distinct", c.author_name, c.author_email, c.message
      FROM push_commits pc JOIN commits c USING (repository_id, sha)`.execute(t.db);
    expect(rows.rows).toEqual([
      {
        position: 0,
        sha: given.id,
        distinct: true,
        author_name: given.author.name,
        author_email: `sha256:${createHash('sha256').update(given.author.email.trim().toLowerCase()).digest('hex')}`,
        message: given.message,
      },
    ]);
    // The address itself is nowhere in the commit rows.
    const clear = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM commits WHERE author_email = ${given.author.email}`.execute(
      t.db,
    );
    expect(clear.rows[0]!.n).toBe(0);
  });
});
