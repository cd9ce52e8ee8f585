import { describe, expect, it } from 'vitest';
import { actorProfile } from '../../src/enrichment/apply-actor.ts';
import { repositoryProfile } from '../../src/enrichment/apply-repository.ts';
import { ProfileInvalid } from '../../src/enrichment/profile.ts';
import { ladderSeconds } from '../../src/platform/attempts.ts';
import { redact } from '../../src/platform/redact.ts';
import { ENTITY_TABLES } from '../../src/work/entity.ts';

const backoffSeconds = (n: number) => ladderSeconds('entity', n);

describe('profile paths', () => {
  it('encodes [bot] logins and odd characters, never changing the resource asked for', () => {
    expect(ENTITY_TABLES.actor.path('dependabot[bot]')).toBe('/users/dependabot%5Bbot%5D');
    expect(ENTITY_TABLES.actor.path('a/b?c#d')).toBe('/users/a%2Fb%3Fc%23d');
    expect(ENTITY_TABLES.repository.path('octocat/Hello-World')).toBe('/repos/octocat/Hello-World');
    expect(ENTITY_TABLES.repository.path('o/na me#1')).toBe('/repos/o/na%20me%231');
  });
});

describe('actorProfile', () => {
  it('maps the documented fields and keeps the whole body', () => {
    const body = {
      id: 583231,
      login: 'octocat',
      name: 'The Octocat',
      company: '@github',
      blog: 'https://github.blog',
      location: 'San Francisco',
      bio: null,
      type: 'User',
      public_repos: 8,
      followers: 9999,
      following: 9,
      created_at: '2011-01-25T18:44:36Z',
    };
    const { id, columns } = actorProfile(body, '/users/octocat');
    expect(id).toBe('583231');
    expect(columns).toMatchObject({
      login: 'octocat',
      name: 'The Octocat',
      company: '@github',
      bio: null,
      type: 'User',
      public_repos: 8,
      followers: 9999,
      following: 9,
      github_created_at: new Date('2011-01-25T18:44:36Z'),
    });
    expect(JSON.parse(columns.profile as string)).toEqual(body);
  });

  it('rejects a body that is not a user object', () => {
    expect(() => actorProfile([], '/users/x')).toThrow(ProfileInvalid);
    expect(() => actorProfile({ login: 'x' }, '/users/x')).toThrow(/no numeric "id"/);
    expect(() => actorProfile({ id: 1 }, '/users/x')).toThrow(/no "login"/);
  });
});

describe('repositoryProfile', () => {
  it('maps counts, license and topics', () => {
    const { id, columns } = repositoryProfile(
      {
        id: 1296269,
        full_name: 'octocat/Hello-World',
        description: 'My first repo',
        language: null,
        stargazers_count: 80,
        forks_count: 9,
        default_branch: 'main',
        fork: false,
        archived: true,
        license: { key: 'mit', spdx_id: 'MIT' },
        topics: ['octocat', 3, 'api'],
        pushed_at: '2011-01-26T19:06:43Z',
        created_at: 'not a date',
      },
      '/repos/octocat/Hello-World',
    );
    expect(id).toBe('1296269');
    expect(columns).toMatchObject({
      full_name: 'octocat/Hello-World',
      stargazers: 80,
      forks: 9,
      fork: false,
      archived: true,
      license: 'MIT',
      topics: ['octocat', 'api'],
      pushed_at: new Date('2011-01-26T19:06:43Z'),
      github_created_at: null,
    });
  });
});

describe('backoff ladder', () => {
  it('grows by four and is capped at six hours', () => {
    expect([1, 2, 3, 4, 5].map(backoffSeconds)).toEqual([60, 240, 960, 3840, 15360]);
    expect(backoffSeconds(9)).toBe(6 * 3600);
  });
});

describe('redact', () => {
  it('never lets a token into the attempts ledger', () => {
    const out = redact(
      'failed: authorization: token ghp_abcdefghijklmnopqrstuvwxyz0123 and github_pat_ABCDEFGHIJKL_x',
    );
    expect(out).not.toContain('ghp_abcdefghijklmnop');
    expect(out).not.toContain('github_pat_ABCDEFGHIJKL');
    expect(redact('x'.repeat(2000))).toHaveLength(500);
  });
});

describe('profiles with text Postgres cannot hold', () => {
  it('bytes that were not UTF-8 (lone surrogates) and NUL become U+FFFD in columns and jsonb', () => {
    const { columns } = actorProfile(
      { id: 7, login: 'm\udc80e', name: 'A\u0000B', bio: 'x\udcff', extra: { k: '\udc81' } },
      '/users/me',
    );
    expect(columns).toMatchObject({ login: 'm\ufffde', name: 'A\ufffdB', bio: 'x\ufffd' });
    expect(JSON.parse(columns.profile as string)).toMatchObject({ extra: { k: '\ufffd' } });
    expect(columns.profile).not.toMatch(/\\u(dc|0000)/i);
  });
});
