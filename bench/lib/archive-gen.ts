import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { createGzip } from 'node:zlib';

/**
 * Generated GH Archive hour files for the backfill benchmarks: NDJSON in the archive's own
 * compact shape, gzipped, streamed to disk (a 1 GB file is never in memory). Half of the
 * events are PushEvents in the github.com shape of 2025 (payload: repository_id, push_id,
 * ref, head, before); the others are a mix of the common types with bodies of realistic
 * size. Actors and repositories recur as they do in an hour of the public timeline: a few
 * hundred busy ones (bots, CI) behind a third of the pushes, the rest spread over a pool.
 *
 * With `commits`, the pushes are in the shape of the years before 2025-10 instead: `size`,
 * `distinct_size` and their commits inline (a short message each, the head last), as every
 * archive line carried them from 2015 to 2025-10-07 (src/store/inline-commits.ts); the hour
 * must then be before that date, or the commits are not believed.
 */

export interface GeneratedFile {
  file: string;
  events: number;
  pushes: number;
  bytes: number;
  compressedBytes: number;
}

const API = 'https://api.github.com';
const sha = (s: string) => createHash('sha1').update(s).digest('hex');

/** A deterministic pseudo-random stream (xorshift32), so every run writes the same file. */
function rng(seed: number) {
  let x = seed || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 4_294_967_296;
  };
}

const LOREM =
  'Thanks for the report. I could reproduce it on the main branch with the steps above; the fix is in the linked pull request and will ship with the next release. ';

function actorJson(id: number): string {
  const login = `dev-${id}`;
  return `{"id":${id},"login":"${login}","display_login":"${login}","gravatar_id":"","url":"${API}/users/${login}","avatar_url":"https://avatars.githubusercontent.com/u/${id}?"}`;
}

function repoJson(id: number): string {
  const name = `org-${id % 5000}/repo-${id}`;
  return `{"id":${id},"name":"${name}","url":"${API}/repos/${name}"}`;
}

export interface GenerateOptions {
  /** Stop after this many events… */
  events?: number;
  /** …or once this many uncompressed bytes are written. */
  bytes?: number;
  /** The hour the events are created in. */
  hourStart?: Date;
  firstEventId?: number;
  actorPool?: number;
  repoPool?: number;
  /** gzip level: 1 for speed (large RSS files), 6 is what the archive uses. */
  level?: number;
  seed?: number;
  firstPushId?: number;
  /**
   * Commits inline in each push, about this many on average (1, 2, 3, 5 or 10 of them,
   * weighted to the mean); absent: the 2025-10 shape, no commits.
   */
  commits?: number;
}

/**
 * How many commits a push carries: for a mean of 2, 55% one, 25% two, 10% three, 7% five
 * and 3% ten (most pushes are one commit, a few are long); another mean stretches the
 * extra commits beyond the first by (mean - 1), rounded, within 1..20 (an event's list).
 */
function commitCount(random: () => number, mean: number): number {
  const r = random();
  const n = r < 0.55 ? 1 : r < 0.8 ? 2 : r < 0.9 ? 3 : r < 0.97 ? 5 : 10;
  return Math.max(1, Math.min(20, Math.round(1 + (n - 1) * (mean - 1))));
}

const MESSAGES = [
  'Fix typo in README',
  'Update dependencies',
  'Add tests for the parser',
  'Refactor config loading',
  'Bump version to 1.4.2',
  'Merge branch main',
  'Handle empty input',
  'Remove unused imports',
];

/** A push's inline commits, oldest first, the last one the head (as GitHub lists them). */
function commitsJson(
  random: () => number,
  id: number,
  head: string,
  n: number,
  actor: number,
  repo: string,
): string {
  const parts: string[] = [];
  for (let i = 0; i < n; i++) {
    const s = i === n - 1 ? head : sha(`c${id}.${i}`);
    const email = `${sha(`dev-${actor}@example.com`)}@example.com`;
    const message = MESSAGES[Math.floor(random() * MESSAGES.length)]!;
    parts.push(
      `{"sha":"${s}","author":{"email":"${email}","name":"Developer ${actor}"},"message":"${message}","distinct":true,"url":"${API}/repos/${repo}/commits/${s}"}`,
    );
  }
  return `[${parts.join(',')}]`;
}

/** Writes a generated hour file; resolves once it is on disk. */
export async function generateHourFile(file: string, o: GenerateOptions): Promise<GeneratedFile> {
  const random = rng(o.seed ?? 12345);
  const maxEvents = o.events ?? Number.POSITIVE_INFINITY;
  const maxBytes = o.bytes ?? Number.POSITIVE_INFINITY;
  const start = (o.hourStart ?? new Date('2026-11-20T10:00:00Z')).getTime();
  const actorPool = o.actorPool ?? 20_000;
  const repoPool = o.repoPool ?? 25_000;
  let eventId = o.firstEventId ?? 60_000_000_000;
  let pushId = o.firstPushId ?? 30_000_000_000;

  const out = createWriteStream(file);
  const gzip = createGzip({ level: o.level ?? 6 });
  gzip.pipe(out);
  let compressedBytes = 0;
  gzip.on('data', (c: Buffer) => {
    compressedBytes += c.length;
  });

  const pick = (pool: number, base: number) =>
    random() < 0.33 ? base + Math.floor(random() * 400) : base + Math.floor(random() * pool);

  let events = 0;
  let pushes = 0;
  let bytes = 0;
  let batch: string[] = [];
  const total = Number.isFinite(maxEvents) ? maxEvents : 1_000_000;
  while (events < maxEvents && bytes < maxBytes) {
    const id = eventId++;
    const actor = pick(actorPool, 3_000_000);
    const repo = pick(repoPool, 7_000_000);
    const createdAt = new Date(start + Math.floor(((events % total) * 3_600_000) / total))
      .toISOString()
      .replace(/\.\d{3}Z$/, 'Z');
    const org = repo % 3 === 0 ? `,"org":{"id":${repo % 5000},"login":"org-${repo % 5000}"}` : '';
    let line: string;
    if (events % 2 === 0) {
      pushes++;
      const p = pushId++;
      const ref = `refs/heads/${random() < 0.8 ? 'main' : `feature-${p % 97}`}`;
      const head = sha(`h${id}`);
      let inline = '';
      if (o.commits !== undefined) {
        const n = commitCount(random, o.commits);
        const name = `org-${repo % 5000}/repo-${repo}`;
        inline = `,"size":${n},"distinct_size":${n},"commits":${commitsJson(random, id, head, n, actor, name)}`;
      }
      line = `{"id":"${id}","type":"PushEvent","actor":${actorJson(actor)},"repo":${repoJson(repo)},"payload":{"repository_id":${repo},"push_id":${p},"ref":"${ref}","head":"${head}","before":"${sha(`b${id}`)}"${inline}},"public":true,"created_at":"${createdAt}"${org}}`;
    } else {
      const kind = Math.floor(random() * 4);
      const payload =
        kind === 0
          ? `{"action":"started"}`
          : kind === 1
            ? `{"ref":"feature-${id % 97}","ref_type":"branch","master_branch":"main","description":null,"pusher_type":"user"}`
            : `{"action":"created","issue":{"number":${id % 5000},"title":"Something is off in the parser"},"comment":{"id":${id},"body":"${LOREM.repeat(1 + Math.floor(random() * 8))}"}}`;
      const type = ['WatchEvent', 'CreateEvent', 'IssueCommentEvent', 'IssueCommentEvent'][kind]!;
      line = `{"id":"${id}","type":"${type}","actor":${actorJson(actor)},"repo":${repoJson(repo)},"payload":${payload},"public":true,"created_at":"${createdAt}"${org}}`;
    }
    batch.push(line);
    bytes += line.length + 1;
    events++;
    if (batch.length >= 1000) {
      if (!gzip.write(`${batch.join('\n')}\n`)) await once(gzip, 'drain');
      batch = [];
    }
  }
  if (batch.length) gzip.write(`${batch.join('\n')}\n`);
  gzip.end();
  await once(out, 'finish');
  return { file, events, pushes, bytes, compressedBytes };
}
