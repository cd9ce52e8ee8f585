#!/usr/bin/env node
/**
 * The fake GitHub as a process, for humans and child-process tests:
 *
 *   node test/support/fake-github-server.ts [--port N] [--seed FILE|demo]
 *          [--limit N] [--poll-interval S] [--latency-ms MS]
 *          [--app-id N --app-public-key FILE --app-installations 1,2 [--app-token-ttl S]]
 *
 * With --app-*, a GitHub App whose JWTs are verified with the public key in FILE (PEM) and
 * whose installations mint tokens at POST /app/installations/{id}/access_tokens.
 *
 * Prints one JSON line `{"url":"http://127.0.0.1:PORT"}` on stdout once listening, then
 * serves until SIGINT/SIGTERM, REST and `POST /graphql` alike. A seed file is JSON:
 *   { "events": { "public": [ …events, oldest first… ] }, "users": [ … ], "repos": [ … ],
 *     "commits": { "owner/name": [ …commits, parents first… ] },
 *     "branches": { "owner/name": { "main": "<sha>" } } }
 * `--seed demo` serves a small generated timeline (12 pushes by 4 actors incl. a bot, dated in
 * the minutes before the server started) over
 * real commit graphs (git-world.ts): each repository's history before its first push, then
 * linear pushes, a new branch, a merge and a force push, so compare and GraphQL answer
 * for every push in it.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { FakeCommit } from './fake-commit-graph.ts';
import { type FakeGitHub, startFakeGitHub } from './fake-github.ts';
import { gitWorld, type WorldPush } from './git-world.ts';
import {
  type GitHubEvent,
  type Json,
  otherEvent,
  pushEvent,
  userProfile,
} from './github-factories.ts';

interface Seed {
  events?: Record<string, GitHubEvent[]>;
  users?: (Json & { id: number; login: string })[];
  repos?: (Json & { id: number; full_name: string })[];
  commits?: Record<string, FakeCommit[]>;
  branches?: Record<string, Record<string, string>>;
}

/** The demo: profiles, graphs and a timeline whose pushes those graphs answer for. */
export function seedDemo(fake: FakeGitHub): void {
  const actors = [
    { id: 583231, login: 'octocat' },
    { id: 49699333, login: 'dependabot[bot]' },
    { id: 1024025, login: 'torvalds' },
    { id: 9919, login: 'github' },
  ];
  // Dated now: the demo's pushes happened in the last minutes, so bin/status --coverage, the
  // page's charts and "pushed in the last 24h" all show them. The commits before them.
  const now = Date.now();
  const world = gitWorld(fake, { start: new Date(now - 3 * 3_600_000) });
  const repos = [
    world.repo('octocat/Hello-World', { id: 1296269 }),
    world.repo('torvalds/linux', { id: 2325298 }),
    world.repo('github/docs', { id: 3222 }),
  ];
  for (const r of repos) r.commit(3, { unpushed: true }); // history before the first push
  // Four pushes a repository: first (with its history), linear, a new branch, then
  // that branch merged (on the last repository a force push instead).
  const pushes: { repo: (typeof repos)[number]; push: WorldPush }[] = [];
  for (const [i, r] of repos.entries()) pushes.push({ repo: r, push: r.push('main', 1 + i) });
  for (const r of repos) pushes.push({ repo: r, push: r.push('main', 2) });
  for (const r of repos) pushes.push({ repo: r, push: r.push('topic', 2) });
  pushes.push({ repo: repos[0]!, push: repos[0]!.merge('main', 'topic') });
  pushes.push({ repo: repos[1]!, push: repos[1]!.merge('main', 'topic', { fastForward: true }) });
  pushes.push({ repo: repos[2]!, push: repos[2]!.forcePush('main', { drop: 1, add: 2 }) });
  const events: GitHubEvent[] = [];
  for (const [i, { repo, push }] of pushes.entries()) {
    const { ref, before, head } = push;
    const at = { id: repo.repositoryId, name: repo.fullName };
    events.push(
      pushEvent({ actor: actors[i % actors.length], repo: at, payload: { ref, before, head } }),
    );
    if (i % 4 === 3)
      events.push(
        otherEvent('WatchEvent', {
          actor: actors[(i + 1) % 4],
          repo: { id: repos[0]!.repositoryId, name: repos[0]!.fullName },
        }),
      );
  }
  // One a minute, the last one a minute ago, oldest first (as the feed lists them).
  for (const [i, ev] of events.entries()) {
    ev.created_at = new Date(now - (events.length - i) * 60_000)
      .toISOString()
      .replace(/\.\d{3}Z$/, 'Z');
  }
  fake.addEvents('public', events);
  for (const a of actors) fake.setUser(userProfile(a));
}

function applySeed(fake: FakeGitHub, seed: Seed): void {
  for (const [feed, events] of Object.entries(seed.events ?? {})) fake.addEvents(feed, events);
  for (const u of seed.users ?? []) fake.setUser(u);
  for (const r of seed.repos ?? []) fake.setRepo(r);
  for (const [repo, commits] of Object.entries(seed.commits ?? {})) fake.addCommits(repo, commits);
  for (const [repo, branches] of Object.entries(seed.branches ?? {}))
    for (const [branch, sha] of Object.entries(branches)) fake.setBranch(repo, branch, sha);
}

const USAGE = `Usage: node test/support/fake-github-server.ts [--port N] [--seed FILE|demo]
       [--limit N] [--poll-interval S] [--latency-ms MS]
       [--app-id N --app-public-key FILE --app-installations 1,2 [--app-token-ttl S]]

A fake GitHub on 127.0.0.1 for trying the ingestor without spending quota: REST and
POST /graphql, with GitHub's rate-limit headers. Prints {"url":"http://127.0.0.1:PORT"} once
listening; point GITHUB_API_URL at that URL. Serves until SIGINT or SIGTERM.

  --port N            port to listen on (default 0: a free one)
  --seed FILE|demo    a JSON seed (events, users, repos, commits, branches), or demo: 12
                      pushes by 4 actors over real commit graphs, one a minute up to a
                      minute before it started
  --limit N           the rate limit an hour, anonymous and per token
  --poll-interval S   the X-Poll-Interval it answers (seconds)
  --latency-ms MS     how long each answer takes
  --app-id N …        a GitHub App whose JWTs the PEM public key verifies, and its
                      installations (--app-installations 1,2; --app-token-ttl S)
  -h, --help          this text
`;

const OPTIONS = {
  port: { type: 'string', default: '0' },
  seed: { type: 'string' },
  limit: { type: 'string' },
  'poll-interval': { type: 'string' },
  'latency-ms': { type: 'string' },
  'app-id': { type: 'string' },
  'app-public-key': { type: 'string' },
  'app-installations': { type: 'string' },
  'app-token-ttl': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** Bad input: one line naming it (and the usage), exit 2. */
function refuse(message: string, usage = false): never {
  process.stderr.write(`fake-github-server: ${message}\n${usage ? USAGE : ''}`);
  process.exit(2);
}

/** A whole number option (absent: undefined, the fake's default). */
function wholeNumber(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n) || n < 0) {
    refuse(`--${name} must be a whole number, got ${JSON.stringify(value)}`);
  }
  return n;
}

async function main(): Promise<void> {
  let values: ReturnType<typeof parseArgs<{ options: typeof OPTIONS }>>['values'];
  try {
    ({ values } = parseArgs({ options: OPTIONS }));
  } catch (err) {
    refuse((err as Error).message, true);
  }
  if (values.help) {
    process.stdout.write(USAGE);
    return;
  }
  const limit = wholeNumber('limit', values.limit);
  const fake = await startFakeGitHub({
    port: wholeNumber('port', values.port),
    anonymousLimit: limit,
    tokenLimit: limit,
    pollInterval: wholeNumber('poll-interval', values['poll-interval']),
    latencyMs: wholeNumber('latency-ms', values['latency-ms']),
  });
  if (values.seed === 'demo') seedDemo(fake);
  else if (values.seed) applySeed(fake, JSON.parse(readFileSync(values.seed, 'utf8')) as Seed);
  if (values['app-id']) {
    fake.addApp({
      id: Number(values['app-id']),
      publicKey: readFileSync(values['app-public-key'] ?? '', 'utf8'),
      installations: (values['app-installations'] ?? '').split(',').map(Number),
      tokenTtlSeconds: values['app-token-ttl'] ? Number(values['app-token-ttl']) : undefined,
    });
  }

  process.stdout.write(`${JSON.stringify({ url: fake.url })}\n`);
  const stop = () => {
    void fake.close().then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((err) => {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
