import { describe, expect, it } from 'vitest';
import { InvalidSource, sourceSpec } from '../../src/platform/config/source-spec.ts';
import { describeSource, feedPath } from '../../src/store/sources.ts';

describe('source validation (GitHub naming rules)', () => {
  it.each([
    ['public', undefined, { kind: 'public' }],
    ['repo', 'octocat/Hello-World', { kind: 'repo', target: 'octocat/Hello-World' }],
    ['repo', 'a/.github', { kind: 'repo', target: 'a/.github' }],
    ['repo', 'some-org/my_repo.js', { kind: 'repo', target: 'some-org/my_repo.js' }],
    ['org', 'github', { kind: 'org', target: 'github' }],
    ['user', 'a', { kind: 'user', target: 'a' }],
    ['user', 'x'.repeat(39), { kind: 'user', target: 'x'.repeat(39) }],
  ])('accepts %s %s', (kind, target, spec) => {
    expect(sourceSpec(kind, target)).toEqual(spec);
  });

  it.each([
    ['repo', undefined],
    ['repo', 'octocat'],
    ['repo', 'octocat/'],
    ['repo', 'octo cat/x'],
    ['repo', 'octocat/..'],
    ['repo', `octocat/${'r'.repeat(101)}`],
    ['repo', 'octocat/hello world'],
    ['org', undefined],
    ['org', '-github'],
    ['user', 'torvalds-'],
    ['user', 'x'.repeat(40)],
    ['user', 'tor_valds'],
    ['public', 'x'],
    ['team', 'x'],
  ])('refuses %s %s', (kind, target) => {
    expect(() => sourceSpec(kind, target)).toThrow(InvalidSource);
  });
});

describe('feeds', () => {
  it.each([
    [{ kind: 'public', target: null }, '/events', 'public'],
    [
      { kind: 'repo', target: 'octocat/Hello-World' },
      '/repos/octocat/Hello-World/events',
      'repo octocat/Hello-World',
    ],
    [{ kind: 'org', target: 'github' }, '/orgs/github/events', 'org github'],
    [{ kind: 'user', target: 'torvalds' }, '/users/torvalds/events', 'user torvalds'],
  ] as const)('%o → %s', (source, path, described) => {
    expect(feedPath(source)).toBe(path);
    expect(describeSource(source)).toBe(described);
  });
});
