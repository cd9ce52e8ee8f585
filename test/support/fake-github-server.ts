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
 * serves until SIGINT/SIGTERM. A seed file is JSON:
 *   { "events": { "public": [ …events, oldest first… ] }, "users": [ … ], "repos": [ … ] }
 * `--seed demo` serves a small generated timeline (12 pushes by 4 actors incl. a bot).
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { startFakeGitHub } from './fake-github.ts';
import {
  type GitHubEvent,
  type Json,
  otherEvent,
  pushEvent,
  repoProfile,
  userProfile,
} from './github-factories.ts';

interface Seed {
  events?: Record<string, GitHubEvent[]>;
  users?: (Json & { id: number; login: string })[];
  repos?: (Json & { id: number; full_name: string })[];
}

export function demoSeed(): Seed {
  const actors = [
    { id: 583231, login: 'octocat' },
    { id: 49699333, login: 'dependabot[bot]' },
    { id: 1024025, login: 'torvalds' },
    { id: 9919, login: 'github' },
  ];
  const repos = [
    { id: 1296269, name: 'octocat/Hello-World' },
    { id: 2325298, name: 'torvalds/linux' },
    { id: 3222, name: 'github/docs' },
  ];
  const events: GitHubEvent[] = [];
  for (let i = 0; i < 12; i++) {
    events.push(pushEvent({ actor: actors[i % actors.length], repo: repos[i % repos.length] }));
    if (i % 4 === 3)
      events.push(otherEvent('WatchEvent', { actor: actors[(i + 1) % 4], repo: repos[0] }));
  }
  return {
    events: { public: events },
    users: actors.map((a) => userProfile(a)),
    repos: repos.map((r) => repoProfile({ id: r.id, full_name: r.name })),
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      port: { type: 'string', default: '0' },
      seed: { type: 'string' },
      limit: { type: 'string' },
      'poll-interval': { type: 'string' },
      'latency-ms': { type: 'string' },
      'app-id': { type: 'string' },
      'app-public-key': { type: 'string' },
      'app-installations': { type: 'string' },
      'app-token-ttl': { type: 'string' },
    },
  });
  const limit = values.limit ? Number(values.limit) : undefined;
  const fake = await startFakeGitHub({
    port: Number(values.port),
    anonymousLimit: limit,
    tokenLimit: limit,
    pollInterval: values['poll-interval'] ? Number(values['poll-interval']) : undefined,
    latencyMs: values['latency-ms'] ? Number(values['latency-ms']) : undefined,
  });
  const seed: Seed =
    values.seed === 'demo'
      ? demoSeed()
      : values.seed
        ? (JSON.parse(readFileSync(values.seed, 'utf8')) as Seed)
        : {};
  for (const [feed, events] of Object.entries(seed.events ?? {})) fake.addEvents(feed, events);
  for (const u of seed.users ?? []) fake.setUser(u);
  for (const r of seed.repos ?? []) fake.setRepo(r);
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
