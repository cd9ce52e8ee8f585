import type { Db } from '../../src/platform/db/pool.ts';
import { chain, insertPushes, insertRepository, type PushSeed, ZERO } from './commit-world.ts';
import type { FakeGitHub } from './fake-github-types.ts';

/**
 * A new branch pushed after main moved past the last push of main this database stored
 * (not a test file). main: three commits, pushed and stored (`stored`); then two more
 * (`moved`), pushed without the database seeing that push; then `topic` is pushed as a
 * new branch with four commits on top of main's new tip. The push's commits are exactly
 * the four: the two of main were main's when the branch was pushed.
 *
 * `after` says what main did after the branch push:
 * - `nothing`: main is where the branch forked (its tip now holds the two);
 * - `rewritten`: main was force-pushed back below the two and given a commit of its own,
 *   a push the database stored (its `before` is main's tip at the branch push): main's tip
 *   now no longer reaches the two.
 */
export interface MovedMain {
  fullName: string;
  stored: string[];
  moved: string[];
  topic: string[];
  /** The new branch's push key. */
  ref: string;
  head: string;
}

export async function movedMainWorld(
  db: Db,
  fake: FakeGitHub,
  o: { id: number; fullName: string; after: 'nothing' | 'rewritten' },
): Promise<MovedMain> {
  await insertRepository(db, o.id, o.fullName, { defaultBranch: 'main' });
  const stored = chain(fake, o.fullName, 3, null, { branch: 'main' });
  const moved = chain(fake, o.fullName, 2, stored[2]!, { branch: 'main' });
  const topic = chain(fake, o.fullName, 4, moved[1]!, { branch: 'topic' });
  const at = (s: number) => new Date(Date.now() - s * 1000);
  const seeds: PushSeed[] = [
    { repositoryId: o.id, before: stored[1]!, head: stored[2]!, state: 'skipped', dueAt: at(600) },
    // main moved stored[2] → moved[1] at(400): a push this database never stored
    { repositoryId: o.id, ref: 'refs/heads/topic', before: ZERO, head: topic[3]!, dueAt: at(300) },
  ];
  if (o.after === 'rewritten') {
    const rewritten = chain(fake, o.fullName, 1, stored[2]!, { branch: 'main' });
    seeds.push({
      repositoryId: o.id,
      before: moved[1]!,
      head: rewritten[0]!,
      state: 'skipped',
      dueAt: at(200),
    });
  }
  await insertPushes(db, seeds);
  return { fullName: o.fullName, stored, moved, topic, ref: 'refs/heads/topic', head: topic[3]! };
}
