import { describe, expect, it } from 'vitest';
import { classifyLine, fastMapPush, mapArchivePush } from '../../src/backfill/events.ts';
import { parseHours } from '../../src/cli/export.ts';
import { matches } from '../../src/export/cache.ts';
import { type ExportRow, exportLine, type LineCommit } from '../../src/export/line.ts';
import { UsageError } from '../../src/platform/errors.ts';
import { NO_TARGETS } from '../../src/store/commits-targets.ts';
import { planCommits } from '../../src/store/inline-commits.ts';

/** One push → one GH Archive line (ADR 0130): its exact bytes, and what an importer reads back. */

const sha = (i: number) => i.toString(16).padStart(40, 'a');
const commit = (i: number, o: Partial<LineCommit> = {}): LineCommit => ({
  sha: sha(i),
  authorName: `Dev ${i}`,
  authorEmail: `sha256:${'0'.repeat(63)}${i % 10}`,
  message: `change ${i}`,
  distinct: true,
  ...o,
});

function row(o: Partial<ExportRow> = {}): ExportRow {
  return {
    id: '40000000001',
    actorId: '1001',
    login: 'octocat',
    repositoryId: '500001',
    fullName: 'octo/hello',
    org: null,
    pushId: '20000000001',
    ref: 'refs/heads/main',
    head: sha(2),
    before: sha(0),
    createdAt: '2026-11-29T14:05:00Z',
    size: 2,
    distinctSize: 1,
    commits: [commit(1, { distinct: false }), commit(2)],
    ...o,
  };
}

describe('exportLine', () => {
  it('writes the Events API PushEvent shape, key by key, compact', () => {
    expect(
      exportLine(
        row({ commits: [commit(2)], size: 1, distinctSize: 1, org: { id: '9', login: 'octo' } }),
      ),
    ).toBe(
      '{"id":"40000000001","type":"PushEvent",' +
        '"actor":{"id":1001,"login":"octocat","display_login":"octocat","gravatar_id":"","url":"https://api.github.com/users/octocat","avatar_url":"https://avatars.githubusercontent.com/u/1001?"},' +
        '"repo":{"id":500001,"name":"octo/hello","url":"https://api.github.com/repos/octo/hello"},' +
        `"payload":{"repository_id":500001,"push_id":20000000001,"size":1,"distinct_size":1,"ref":"refs/heads/main","head":"${sha(2)}","before":"${sha(0)}",` +
        `"commits":[{"sha":"${sha(2)}","author":{"email":"sha256:${'0'.repeat(63)}2","name":"Dev 2"},"message":"change 2","distinct":true,"url":"https://api.github.com/repos/octo/hello/commits/${sha(2)}"}]},` +
        '"public":true,"created_at":"2026-11-29T14:05:00Z",' +
        '"org":{"id":9,"login":"octo","gravatar_id":"","url":"https://api.github.com/orgs/octo","avatar_url":"https://avatars.githubusercontent.com/u/9?"}}',
    );
  });

  it('writes 64-bit ids with every digit, a webhook-only push with "id": null', () => {
    const line = exportLine(row({ id: null, repositoryId: '9223372036854775807', pushId: null }));
    expect(line).toContain('"id":null,"type":"PushEvent"');
    expect(line).toContain('"repo":{"id":9223372036854775807,');
    expect(line).toContain('"payload":{"repository_id":9223372036854775807,"size":2');
    expect(() => exportLine(row({ actorId: '12a' }))).toThrow(/not an id/);
  });

  it('leaves out size, distinct_size and commits when the count is unknown, distinct_size alone when it is', () => {
    const unknown = JSON.parse(exportLine(row({ size: null })));
    expect(Object.keys(unknown.payload)).toEqual([
      'repository_id',
      'push_id',
      'ref',
      'head',
      'before',
    ]);
    const noDistinct = JSON.parse(exportLine(row({ distinctSize: null })));
    expect(Object.keys(noDistinct.payload)).toEqual([
      'repository_id',
      'push_id',
      'size',
      'ref',
      'head',
      'before',
      'commits',
    ]);
    const noList = JSON.parse(exportLine(row({ commits: null })));
    expect(noList.payload).toMatchObject({ size: 2, distinct_size: 1 });
    expect(noList.payload).not.toHaveProperty('commits');
  });

  it('lists at most 20 commits, escapes text as JSON does, keeps null authors and distinct', () => {
    const many = Array.from({ length: 25 }, (_, i) => commit(i));
    const parsed = JSON.parse(exportLine(row({ size: 25, commits: many })));
    expect(parsed.payload.commits.map((c: { sha: string }) => c.sha)).toEqual(
      many.slice(0, 20).map((c) => c.sha),
    );
    const odd = commit(3, {
      message: 'a "b"\n\\ \u0001 ✓',
      authorName: null,
      authorEmail: null,
      distinct: null,
    });
    const line = exportLine(row({ commits: [odd] }));
    expect(line).toContain('"message":"a \\"b\\"\\n\\\\ \\u0001 ✓"');
    expect(JSON.parse(line).payload.commits[0]).toMatchObject({
      author: { email: null, name: null },
      distinct: null,
    });
  });

  it('reads back through the archive import exactly: the fast path, every commit kept, unverified from a mirror (ADR 0184)', () => {
    const line = exportLine(row());
    const verdict = classifyLine(Buffer.from(line));
    expect(verdict.kind).toBe('push');
    if (verdict.kind !== 'push') return;
    // GH Archive's own shape: the importer's fast path takes it (no exact re-parse).
    expect(fastMapPush(verdict.event, verdict.text)).not.toBeNull();
    const push = mapArchivePush(verdict.event, verdict.text, 1);
    expect(push).toMatchObject({
      id: '40000000001',
      actor: { id: '1001', login: 'octocat' },
      repository: { id: '500001', fullName: 'octo/hello' },
      pushId: '20000000001',
      size: 2,
      distinctSize: 1,
    });
    if ('rejected' in push) return;
    // Another instance reading this line holds it as a mirror's claim: every commit kept,
    // unverified until GitHub proves them. The same list from GitHub itself is complete.
    const plan = planCommits(push, NO_TARGETS, 'mirror');
    expect(plan).toMatchObject({ state: 'unverified', count: 2, source: 'mirror', refused: null });
    expect(planCommits(push, NO_TARGETS, 'github').state).toBe('complete');
    expect(plan.commits.map((c) => [c.sha, c.authorName, c.distinct])).toEqual([
      [sha(1), 'Dev 1', false],
      [sha(2), 'Dev 2', true],
    ]);
    // "id": null: a webhook copy, not a rejection.
    const hooked = classifyLine(Buffer.from(exportLine(row({ id: null, pushId: null }))));
    if (hooked.kind !== 'push') throw new Error(hooked.kind);
    expect(mapArchivePush(hooked.event, hooked.text, 1)).toMatchObject({
      id: null,
      pushId: null,
      size: 2,
    });
    // A line with no id at all is still refused.
    const noId = JSON.parse(line);
    delete noId.id;
    const bad = classifyLine(Buffer.from(JSON.stringify(noId)));
    if (bad.kind !== 'push') throw new Error(bad.kind);
    expect(mapArchivePush(bad.event, bad.text, 1)).toMatchObject({ rejected: 'malformed' });
  });
});

describe('If-None-Match', () => {
  it('matches the ETag in a list, weak or strong, or *', () => {
    expect(matches('"abc"', '"abc"')).toBe(true);
    expect(matches('"x", W/"abc"', '"abc"')).toBe(true);
    expect(matches('*', '"abc"')).toBe(true);
    expect(matches('"abd"', '"abc"')).toBe(false);
    expect(matches(undefined, '"abc"')).toBe(false);
  });
});

describe('bin/export HOUR arguments', () => {
  const now = new Date('2026-11-30T12:30:00Z');
  it('takes GH Archive hours, once each, padded or not', () => {
    expect(
      parseHours(['2026-11-29-14', '2026-11-29-05', '2026-11-29-14'], now).map((h) => h.name),
    ).toEqual(['2026-11-29-14', '2026-11-29-5']);
    expect(parseHours(['2026-11-30-12'], now).map((h) => h.name)).toEqual(['2026-11-30-12']);
  });
  it('names the first argument that is not an hour, and refuses the future', () => {
    for (const bad of [
      '2026-02-30',
      '2026-11-29-24',
      '2026-02-30-1',
      'yesterday',
      '2026-11-29-1x',
    ]) {
      expect(() => parseHours(['2026-11-29-1', bad], now)).toThrow(UsageError);
      expect(() => parseHours([bad], now)).toThrow(`"${bad}" is not an hour`);
    }
    expect(() => parseHours(['2026-11-30-13'], now)).toThrow(/in the future/);
  });
  it('takes a day as its hours, those begun today, and refuses a day to come', () => {
    const names = (args: string[]) => parseHours(args, now).map((h) => h.name);
    expect(names(['2026-11-29'])).toEqual(Array.from({ length: 24 }, (_, h) => `2026-11-29-${h}`));
    expect(names(['2026-11-30'])).toEqual(Array.from({ length: 13 }, (_, h) => `2026-11-30-${h}`));
    expect(names(['2026-11-29-5', '2026-11-29'])).toHaveLength(24);
    expect(() => parseHours(['2026-12-01'], now)).toThrow(/in the future/);
  });
});
