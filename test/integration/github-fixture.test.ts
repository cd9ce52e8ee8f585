import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { FixtureMiss, MalformedResponse } from '../../src/github/errors.ts';
import { fixtureFile } from '../../src/github/transport.ts';
import { useTestDatabase } from '../support/db.ts';
import { clientFactory } from '../support/github-client.ts';
import type { GitHubEvent } from '../support/github-factories.ts';

/** Fixture mode: answers from files, through the same ledger, gate and budget. */

const t = useTestDatabase();
const clients = clientFactory(t);
afterEach(() => clients.closeAll());

const SHIPPED = 'test/fixtures/github';
const API = 'https://api.github.com';
const fixtureClient = (dir = SHIPPED) =>
  clients.make({ apiUrl: API, mode: 'fixture', fixturesDir: dir, token: null });

describe('fixture mode', () => {
  it('answers the shipped events page and honours its ETag with a 304', async () => {
    const gh = fixtureClient();
    expect(gh).toMatchObject({ mode: 'fixture', credential: 'fixture' });

    const page = await gh.request<GitHubEvent[]>({
      purpose: 'poll',
      path: '/events?per_page=100&page=1',
    });
    expect(page.status).toBe(200);
    expect(page.pollInterval).toBe(60);
    expect(page.url).toBe(`${API}/events?per_page=100&page=1`);
    const again = await gh.request({
      purpose: 'poll',
      path: '/events?per_page=100&page=1',
      etag: page.etag,
    });
    expect(again).toMatchObject({ status: 304, counted: false });

    const rows = await t.db
      .selectFrom('github_requests')
      .select(['credential', 'outcome', 'status', 'counted'])
      .orderBy('id')
      .execute();
    expect(rows).toEqual([
      { credential: 'fixture', outcome: 'completed', status: 200, counted: true },
      { credential: 'fixture', outcome: 'completed', status: 304, counted: false },
    ]);
  });

  it('ships a profile for every actor and repository the events page references', async () => {
    const gh = fixtureClient();
    const page = await gh.request<GitHubEvent[]>({
      purpose: 'poll',
      path: '/events?per_page=100&page=1',
    });
    const events = page.data!;
    const pushes = events.filter((e) => e.type === 'PushEvent');
    expect(pushes.length).toBeGreaterThanOrEqual(10);
    expect(events.length).toBeGreaterThan(pushes.length);
    for (const e of pushes) {
      expect(Object.keys(e.payload).sort()).toEqual([
        'before',
        'head',
        'push_id',
        'ref',
        'repository_id',
      ]);
    }
    const logins = new Set(pushes.map((e) => e.actor.login));
    expect(logins).toContain('dependabot[bot]');
    for (const login of logins) {
      const u = await gh.request<{ id: number }>({
        purpose: 'enrich',
        path: `/users/${encodeURIComponent(login)}`,
      });
      expect(u.data!.id).toBe(pushes.find((e) => e.actor.login === login)!.actor.id);
    }
    for (const name of new Set(pushes.map((e) => e.repo.name))) {
      const r = await gh.request<{ full_name: string }>({
        purpose: 'enrich',
        path: `/repos/${name}`,
      });
      expect(r.data!.full_name).toBe(name);
    }
  });

  it('an unknown request is FixtureMiss naming the file; the reservation is settled as an error', async () => {
    const gh = fixtureClient();
    const err = await gh.request({ purpose: 'enrich', path: '/users/nobody-here' }).catch((e) => e);
    expect(err).toBeInstanceOf(FixtureMiss);
    expect(err.message).toContain(path.join(SHIPPED, 'get/users/nobody-here.json'));
    const row = await t.db
      .selectFrom('github_requests')
      .select(['outcome', 'status'])
      .orderBy('id', 'desc')
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ outcome: 'error', status: null });
  });

  describe('custom fixture files', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'gpi-fixtures-'));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));
    const put = (p: string, content: unknown) => {
      const file = fixtureFile(dir, 'GET', p);
      mkdirSync(path.dirname(file), { recursive: true });
      writeFileSync(file, JSON.stringify(content));
    };

    it('classify statuses and raw bodies as live answers are', async () => {
      put('/users/gone', { status: 404, body: { message: 'Not Found' } });
      put('/users/broken', { status: 200, bodyText: '{"login": "bro' });
      const gh = fixtureClient(dir);
      expect(await gh.request({ purpose: 'enrich', path: '/users/gone' })).toMatchObject({
        status: 404,
        data: undefined,
      });
      await expect(gh.request({ purpose: 'enrich', path: '/users/broken' })).rejects.toBeInstanceOf(
        MalformedResponse,
      );
      expect(readFileSync(fixtureFile(dir, 'GET', '/users/gone'), 'utf8')).toContain('404');
    });
  });
});

describe('fixtureFile', () => {
  it('maps requests to lower-case, decoded, query-sorted names', () => {
    expect(fixtureFile('d', 'GET', '/events?per_page=100&page=1')).toBe(
      'd/get/events__page-1_per_page-100.json',
    );
    expect(fixtureFile('d', 'GET', '/users/dependabot%5Bbot%5D')).toBe(
      'd/get/users/dependabot[bot].json',
    );
    expect(fixtureFile('d', 'GET', '/repos/Octocat/Hello-World/events?page=2&per_page=100')).toBe(
      'd/get/repos/octocat/hello-world/events__page-2_per_page-100.json',
    );
    expect(fixtureFile('d', 'GET', '/users/a%2F..%2Fb')).toBe('d/get/users/a_.._b.json');
    // Dot segments are resolved as URLs resolve them: never above the fixtures directory.
    expect(fixtureFile('d', 'GET', '/users/%2E%2E/%2E%2E/%2E%2E/x')).toBe('d/get/x.json');
  });
});
