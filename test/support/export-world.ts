import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { sql } from 'kysely';
import type pg from 'pg';
import { archiveHourSource } from '../../src/backfill/archive.ts';
import { importFile } from '../../src/backfill/import.ts';
import type { Db } from '../../src/platform/db/pool.ts';
import { type ArchiveHour, hourOf } from '../../src/store/archive-hours.ts';
import { storeCommits } from '../../src/store/commits.ts';
import { loadCommitsTargets } from '../../src/store/commits-targets.ts';
import { storePushes } from '../../src/store/pushes.ts';
import { addSource } from '../../src/store/sources.ts';
import { mapPushDelivery } from '../../src/webhooks/push.ts';
import { gzipLines } from './archive-server.ts';
import { memoryLogger } from './github-client.ts';
import { type GitHubEvent, pushEvent, sha } from './github-factories.ts';

/**
 * A store holding one of every kind of push an hour file must get right (not a test file),
 * built through the real paths: pre-2025 GH Archive lines with size and commits (the
 * inline path), a webhook delivery (no event id), a push whose commits were fetched
 * (distinct unknown), a pending one, a tag, a partial one of 25 commits, one of a private
 * repository. Four consecutive hours, all over; the pushes are in the second (`pushHour`),
 * the other three were read from the archive empty, so the store knows them.
 */

export interface ExportWorld {
  hours: ArchiveHour[];
  pushHour: ArchiveHour;
  /** The repository every mirrored push is in (owned by an organization). */
  repo: { id: number; name: string };
  org: { id: number; login: string };
  /** Heads by kind. */
  heads: Record<
    | 'three'
    | 'unicode'
    | 'tieA'
    | 'tieB'
    | 'webhook'
    | 'fetched'
    | 'partial'
    | 'tag'
    | 'skipped'
    | 'pending'
    | 'privateRepo'
    | 'webhookUnknownRepo',
    string
  >;
  /** Heads of pushes in `repo` (what a mirror of it must hold). */
  repoHeads: string[];
  /** Lines the hour file has (the private push and the unknown repository's webhook are held back). */
  visible: number;
}

let seq = 0;

function commitsOf(n: number, o: { distinct?: (i: number) => boolean; email?: string } = {}) {
  return Array.from({ length: n }, (_, i) => ({
    sha: sha(`export-world-${seq}-${i}-${Math.random()}`),
    author: { email: o.email ?? `Dev${i % 3}@Example.com`, name: `Dev ${i % 3}` },
    message: `change ${i} of ${n}\n\nwhy it was made`,
    distinct: o.distinct ? o.distinct(i) : true,
    url: 'https://api.github.com/repos/ignored/ignored/commits/x',
  }));
}

async function setProfile(db: Db, id: number, profile: Record<string, unknown>): Promise<void> {
  await sql`UPDATE repositories SET profile = ${JSON.stringify(profile)}::jsonb,
    enrichment_state = 'enriched', enriched_at = now() WHERE id = ${id}`.execute(db);
}

export async function buildExportWorld(
  store: { db: Db; pool: pg.Pool },
  o: { hoursAgo?: number } = {},
): Promise<ExportWorld> {
  seq++;
  const base = hourOf(new Date(Date.now() - (o.hoursAgo ?? 8) * 3_600_000)).start.getTime();
  const hours = [0, 1, 2, 3].map((i) => hourOf(new Date(base + i * 3_600_000)));
  const pushHour = hours[1]!;
  const at = (minute: number, second = 0) =>
    new Date(pushHour.start.getTime() + minute * 60_000 + second * 1000);
  const n = 7_000 + seq * 100;
  const org = { id: 880_000 + seq, login: `export-org-${seq}` };
  const repo = { id: 9_100_000 + seq * 10, name: `${org.login}/mirrored` };
  const other = { id: repo.id + 1, name: `export-user-${seq}/other` };
  const targeted = { id: repo.id + 2, name: `export-user-${seq}/targeted` };
  const secret = { id: repo.id + 3, name: `export-user-${seq}/secret` };
  const unknown = { id: repo.id + 4, name: `export-user-${seq}/unknown` };
  const actor = { id: 55_000 + seq, login: `exporter-${seq}` };
  const bot = { id: 56_000 + seq, login: `helper-${seq}[bot]` };

  // The pending push's repository is a target of commit fetching: its push waits.
  const { source } = await addSource(store.db, { kind: 'repo', target: targeted.name }, 'live');
  await store.db
    .updateTable('event_sources')
    .set({ commits_enabled: true })
    .where('id', '=', source.id)
    .execute();

  const line = (
    minute: number,
    r: { id: number; name: string },
    payload: Record<string, unknown>,
    extra: { id?: number; actor?: { id: number; login: string }; second?: number } = {},
  ): GitHubEvent =>
    pushEvent({
      id: extra.id ?? n + minute * 3 + (extra.second ?? 0),
      actor: extra.actor ?? actor,
      repo: r,
      created_at: at(minute, extra.second ?? 0),
      payload,
      // GitHub names the organisation that owns the repository in every event of it.
      ...(r.id === repo.id ? { org } : {}),
    });
  const pre2025 = (commits: ReturnType<typeof commitsOf>, size = commits.length) => ({
    size,
    distinct_size: commits.filter((c) => c.distinct).length,
    commits,
  });
  // A whole list ends with the push's head, as GitHub's does (src/store/commit-list.ts).
  const endingAt = (commits: ReturnType<typeof commitsOf>, head: string) => {
    commits.at(-1)!.sha = head;
    return commits;
  };

  const three = commitsOf(3, { distinct: (i) => i !== 1 });
  const unicode = commitsOf(1);
  unicode[0]!.message = 'fix: ünïcode ✓ "quoted" \\ back\n\n\tindented';
  unicode[0]!.author.name = 'Zoë 🚀';
  const twentyFive = commitsOf(25);
  const heads = {
    three: sha(`three-${seq}`),
    unicode: sha(`unicode-${seq}`),
    tieA: sha(`tieA-${seq}`),
    tieB: sha(`tieB-${seq}`),
    webhook: sha(`webhook-${seq}`),
    fetched: sha(`fetched-${seq}`),
    partial: sha(`partial-${seq}`),
    tag: sha(`tag-${seq}`),
    skipped: sha(`skipped-${seq}`),
    pending: sha(`pending-${seq}`),
    privateRepo: sha(`private-${seq}`),
    webhookUnknownRepo: sha(`webhook-unknown-${seq}`),
  };
  const tie = commitsOf(2);
  const lines: GitHubEvent[] = [
    line(5, repo, { head: heads.three, ...pre2025(endingAt(three, heads.three)) }),
    line(
      7,
      repo,
      { head: heads.unicode, ...pre2025(endingAt(unicode, heads.unicode)) },
      { actor: bot },
    ),
    // Two pushes in the same second: the event id orders them (B's id is the smaller).
    line(
      9,
      repo,
      { head: heads.tieA, ...pre2025(endingAt(tie.slice(0, 1), heads.tieA)) },
      {
        id: n + 901,
      },
    ),
    line(
      9,
      repo,
      { head: heads.tieB, ...pre2025(endingAt(tie.slice(1), heads.tieB)) },
      {
        id: n + 900,
      },
    ),
    // 25 commits, the Events API's 20 (the oldest) listed: partial, in another repository.
    line(11, other, {
      head: heads.partial,
      size: 25,
      distinct_size: 25,
      commits: twentyFive.slice(0, 20),
    }),
    line(13, other, {
      ref: 'refs/tags/v1.0.0',
      head: heads.tag,
      size: 0,
      distinct_size: 0,
      commits: [],
    }),
    // Since 2025-10: no size, no commits; nobody targets it.
    line(15, other, { head: heads.skipped }),
    // Targeted and without commits: pending.
    line(17, targeted, { head: heads.pending }),
    line(19, secret, {
      head: heads.privateRepo,
      ...pre2025(endingAt(commitsOf(1), heads.privateRepo)),
    }),
  ];
  const dir = mkdtempSync(path.join(tmpdir(), 'gpi-export-world-'));
  try {
    for (const h of hours) {
      writeFileSync(path.join(dir, `${h.name}.json.gz`), gzipLines(h === pushHour ? lines : []));
    }
    const mirror = pathToFileURL(dir).href;
    const deps = {
      pool: store.pool,
      db: store.db,
      logger: memoryLogger('silent').logger,
      workerId: 'export-world:1',
    };
    for (const h of hours) {
      const r = await importFile(deps, archiveHourSource(mirror, h), {
        scope: 'all',
        sourceId: null,
        gapId: null,
      });
      if (r.outcome !== 'completed')
        throw new Error(`world import ${h.name}: ${r.outcome} ${r.error?.message}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  // Lines of a recent hour that carry commits are a mirror's claim, whoever serves them
  // (ADR 0184): stored unverified, the commits kept. This world stands for a store whose
  // fetcher has since proven them (GitHub's answer listing the same commits): complete when
  // every commit is listed, partial otherwise, the text GitHub's.
  await sql`
    UPDATE push_events p SET commits_state = CASE WHEN p.commit_count = (
        SELECT count(*) FROM push_commits pc
        WHERE (pc.repository_id, pc.ref, pc.before, pc.head) = (p.repository_id, p.ref, p.before, p.head)
      ) THEN 'complete' ELSE 'partial' END
    WHERE p.commits_state = 'unverified'`.execute(store.db);
  await sql`UPDATE commits SET source = 'github' WHERE source = 'mirror'`.execute(store.db);

  // A webhook delivery: no event id; its repository is known public.
  const hooked = commitsOf(2);
  const delivery = (r: { id: number; name: string }, head: string, minute: number) =>
    mapPushDelivery(
      {
        ref: 'refs/heads/main',
        before: sha(`before-${head}`),
        after: head,
        repository: {
          id: r.id,
          full_name: r.name,
          pushed_at: Math.floor(at(minute).getTime() / 1000),
        },
        ...(r.id === repo.id ? { organization: { id: org.id, login: org.login } } : {}),
        sender: { id: actor.id, login: actor.login },
        commits: endingAt(
          hooked.map((c) => ({ ...c })),
          head,
        ).map((c) => ({
          id: c.sha,
          message: c.message,
          distinct: c.distinct,
          url: `https://github.com/${r.name}/commit/${c.sha}`,
          author: c.author,
        })),
      },
      at(minute),
    );
  const targets = await loadCommitsTargets(store.db);
  await store.db.transaction().execute(async (trx) => {
    await storePushes(
      trx,
      [delivery(repo, heads.webhook, 21), delivery(unknown, heads.webhookUnknownRepo, 23)],
      {
        origin: 'webhook',
        commits: { targets, emails: 'hash' },
      },
    );
  });

  // A polled push (no commits in the event) whose commits a compare answer brought: its
  // commits do not say whether they are distinct.
  const fetchedCommits = endingAt(commitsOf(4), heads.fetched);
  const before = sha(`before-fetched-${seq}`);
  await store.db.transaction().execute(async (trx) => {
    await storePushes(
      trx,
      [
        {
          id: String(n + 990),
          actor,
          repository: { id: String(repo.id), fullName: repo.name },
          pushId: String(n + 991),
          ref: 'refs/heads/feature',
          head: heads.fetched,
          before,
          createdAt: at(25, 30),
          payload: {
            repository_id: repo.id,
            push_id: n + 991,
            ref: 'refs/heads/feature',
            head: heads.fetched,
            before,
          },
          size: null,
          distinctSize: null,
        },
      ].map((p) => ({ ...p, actor: { id: String(actor.id), login: actor.login } })),
      { origin: 'poll' },
    );
    await storeCommits(
      trx,
      [
        {
          push: {
            repositoryId: String(repo.id),
            ref: 'refs/heads/feature',
            before,
            head: heads.fetched,
          },
          commits: fetchedCommits.map((c) => ({
            sha: c.sha,
            authorName: c.author.name,
            authorEmail: c.author.email,
            message: c.message,
            distinct: null,
          })),
        },
      ],
      { emails: 'hash' },
    );
    await sql`UPDATE push_events SET commits_state = 'complete', commit_count = 4
      WHERE head = ${heads.fetched}`.execute(trx);
  });

  await setProfile(store.db, repo.id, {
    private: false,
    owner: { type: 'Organization', id: org.id, login: org.login },
  });
  await setProfile(store.db, other.id, {
    private: false,
    owner: { type: 'User', id: 1, login: 'x' },
  });
  await setProfile(store.db, secret.id, {
    private: true,
    owner: { type: 'User', id: 2, login: 'y' },
  });
  return {
    hours,
    pushHour,
    repo,
    org,
    heads,
    repoHeads: [heads.three, heads.unicode, heads.tieA, heads.tieB, heads.webhook, heads.fetched],
    visible: 10,
  };
}
