import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/platform/config/config.ts';
import {
  type CommitsTargets,
  commitsOffReason,
  isTargeted,
} from '../../src/store/commits-targets.ts';

// Who gets commits, decided in the process (ADR 0070, ADR 0112): set probes, no query.

const targets = (o: Partial<CommitsTargets>): CommitsTargets => ({
  publicPushes: false,
  repositories: new Set(),
  owners: new Set(),
  actors: new Set(),
  ...o,
});
const push = (fullName: string, login = 'someone', hidden?: true) => ({
  actor: { login },
  repository: { fullName },
  ...(hidden ? { private: hidden } : {}),
});

describe('isTargeted', () => {
  it('the public source covers every push not known to be private', () => {
    const t = targets({ publicPushes: true });
    expect(isTargeted(t, push('any/one'))).toBe(true);
    expect(isTargeted(t, push('any/one', 'x', true))).toBe(false);
  });

  it('a repo, org or user source covers its pushes, private ones included, without case', () => {
    const t = targets({
      repositories: new Set(['acme/rockets']),
      owners: new Set(['widgets']),
      actors: new Set(['mona']),
    });
    expect(isTargeted(t, push('Acme/Rockets', 'x', true))).toBe(true);
    expect(isTargeted(t, push('WIDGETS/anything'))).toBe(true);
    expect(isTargeted(t, push('other/thing', 'Mona'))).toBe(true);
    expect(isTargeted(t, push('other/thing'))).toBe(false);
    expect(isTargeted(t, push('acme/rocketship'))).toBe(false);
  });
});

describe('commitsOffReason', () => {
  const github = (env: Record<string, string>) =>
    loadConfig({ DATABASE_URL: 'postgres://x/y', ...env }).github;

  it('names the missing credential when the process has none', () => {
    expect(commitsOffReason(github({ GITHUB_MODE: 'live' }))).toMatch(
      /^no GitHub credential: .*GITHUB_TOKEN/,
    );
  });

  it('is null with a token, or in fixture mode', () => {
    expect(commitsOffReason(github({ GITHUB_TOKEN: `ghp_${'a'.repeat(36)}` }))).toBeNull();
    expect(commitsOffReason(github({ GITHUB_MODE: 'fixture' }))).toBeNull();
  });
});
