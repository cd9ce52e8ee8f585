import type { CommitEmailMode } from '../platform/config/config.ts';
import type { CommitSource } from '../platform/db/columns.ts';
import { copyField } from '../platform/db/copy.ts';
import { jsonTextUnderPolicy } from './commit-emails.ts';
import { type PushCommits, textArray } from './commits.ts';
import { type CommitsTargets, NO_TARGETS } from './commits-targets.ts';
import { insertedList, planCommits, stagedState } from './inline-commits.ts';
import type { PushRow } from './mapping.ts';
import { payloadRest } from './payload-rest.ts';

/**
 * Pushes encoded for the bulk store's staging table (src/store/pushes.ts): COPY
 * text lines written straight into one Buffer as the pushes are parsed, with the few facts
 * the caller still needs beside them (event id, actor and repository ids, the new actors
 * and repositories with their names for insertStagedEntities). A line is a few hundred
 * bytes where a PushRow with its parsed payload is kilobytes of objects, and a Buffer the
 * import reuses is no work for the garbage collector: this is what keeps a 1 GB archive
 * file's import under ~250 MB (docs/performance.md).
 */

const text = copyField;
/** Inline commits of a staged batch when the caller does not say: a mirror's, hashed. */
const DEFAULT_INLINE = { source: 'mirror', emails: 'hash' } as const;
const num = (n: number | string | null) => (n === null ? '\\N' : String(n));

/**
 * Actors and repositories an import has seen committed (archive imports only: they insert
 * missing entities and never rename, so a known id needs no statement at all). One per
 * import, never shared: nothing deletes an entity while a file is read, but a set that
 * outlived its import could outlive a TRUNCATE. Bounded: past MAX_KNOWN ids a set starts
 * over, which only costs a few redundant probes.
 */
export class KnownEntities {
  static readonly MAX_KNOWN = 100_000;
  readonly actors = new Set<string>();
  readonly repositories = new Set<string>();

  /** Call after the transaction that stored rows [from, to) of `batch` committed. */
  remember(batch: StageBatch, from = 0, to = batch.length): void {
    for (let i = from; i < to; i++) {
      if (this.actors.size >= KnownEntities.MAX_KNOWN) this.actors.clear();
      if (this.repositories.size >= KnownEntities.MAX_KNOWN) this.repositories.clear();
      const actor = batch.actorIds[i];
      if (actor) this.actors.add(actor);
      this.repositories.add(batch.repositoryIds[i]!);
    }
  }
}

export class StageBatch {
  #buf: Buffer;
  #end = 0;
  /** Byte offset where each row's line starts. */
  readonly offsets: number[] = [];
  readonly ids: (string | null)[] = [];
  /** Ids are canonical decimal strings (exact: GitHub ids are 64-bit); null: login only. */
  readonly actorIds: (string | null)[] = [];
  readonly repositoryIds: string[] = [];
  /** Entities not known to exist, each once with its newest name in the batch: id → [name, at]. */
  readonly newActors = new Map<string, [string, number]>();
  readonly newRepositories = new Map<string, [string, number]>();
  /** A created_at of each month the batch's pushes fall in (their partitions must exist). */
  readonly months = new Map<number, Date>();
  /**
   * Inline commits (pre-2025-10 archive lines), with the row each belongs to, and whether
   * the row carries them as its list (insertedList: every commit says its distinct).
   */
  readonly commits: { row: number; push: PushCommits; listed: boolean }[] = [];
  /** Natural keys of the batch's rows, and those given by more than one row. */
  readonly #keys = new Set<string>();
  readonly #repeated = new Set<string>();

  constructor(capacityBytes = 1 << 20) {
    this.#buf = Buffer.allocUnsafe(capacityBytes);
  }

  get length(): number {
    return this.offsets.length;
  }

  /**
   * Appends one push in the stage's column order. With `known`, an entity known to exist is
   * left out of newActors / newRepositories, so insertStagedEntities does not even probe
   * it; `known` may lag what is committed (a chunk in flight), never lead it. `inline` says
   * who vouches for the file's inline commits: `archive` (GH Archive's own, a file named on
   * the command line) or `mirror`; `emails` is COMMIT_EMAILS, which holds in the stored
   * payload as in the commits.
   */
  add(
    p: PushRow,
    known: KnownEntities | null = null,
    targets: CommitsTargets = NO_TARGETS,
    inline: { source: CommitSource; emails: CommitEmailMode } = DEFAULT_INLINE,
  ): void {
    const plan = planCommits(p, targets, inline.source);
    const list = insertedList(plan);
    const key = `${p.repository.id}\u0000${p.ref}\u0000${p.before}\u0000${p.head}`;
    if (this.#keys.has(key)) this.#repeated.add(key);
    else this.#keys.add(key);
    if (plan.commits.length > 0) {
      this.commits.push({
        listed: list !== null,
        row: this.offsets.length,
        push: {
          push: { repositoryId: p.repository.id, ref: p.ref, before: p.before, head: p.head },
          commits: plan.commits,
          source: plan.source,
          ifState: plan.state,
        },
      });
    }
    const { rest, held } = payloadRest(p, plan);
    const payload = rest === null ? null : jsonTextUnderPolicy(rest, inline.emails);
    const line = `${p.id ?? '\\N'}\t${p.actor.id ?? '\\N'}\t${p.repository.id}\t${num(p.pushId)}\t${text(p.ref)}\t${text(p.head)}\t${text(p.before)}\t${p.createdAt.toISOString()}\t${text(payload)}\t${num(p.size)}\t${num(plan.distinctSize)}\t${num(plan.count)}\t${stagedState(plan)}\t${plan.due ? 't' : 'f'}\t${text(plan.refused)}\t${text(p.actor.login)}\t${text(p.repository.fullName)}\t${num(p.org?.id ?? null)}\t${text(p.org?.login ?? null)}\t${held}\t${list?.flags ?? '\\N'}\t${list?.shaHex ? `\\\\x${list.shaHex}` : '\\N'}\t${textArray(list?.shaTexts) ?? '\\N'}\n`;
    // UTF-8 needs at most 3 bytes per UTF-16 unit: room for that, and encode only once.
    const bytes = line.length * 3;
    if (this.#end + bytes > this.#buf.length) {
      const grown = Buffer.allocUnsafe(Math.max(this.#buf.length * 2, this.#end + bytes));
      this.#buf.copy(grown, 0, 0, this.#end);
      this.#buf = grown;
    }
    this.offsets.push(this.#end);
    this.#end += this.#buf.write(line, this.#end);
    this.ids.push(p.id);
    this.actorIds.push(p.actor.id);
    this.repositoryIds.push(p.repository.id);
    // Keyed by a number (year × 12 + month): a row costs no string.
    this.months.set(p.createdAt.getUTCFullYear() * 12 + p.createdAt.getUTCMonth(), p.createdAt);
    const at = p.createdAt.getTime();
    // An actor named by login only (a timeline line) has no actors row: it is keyed by id.
    if (p.actor.id !== null && !known?.actors.has(p.actor.id)) {
      newest(this.newActors, p.actor.id, p.actor.login, at);
    }
    if (!known?.repositories.has(p.repository.id))
      newest(this.newRepositories, p.repository.id, p.repository.fullName, at);
  }

  /**
   * The inline commits of rows [from, to), split by whether a merge that inserts their
   * pushes writes their lists as they are: `listed` when the row carries its list and no
   * other row of the batch gives the same push (the merge keeps one row of a repeated push,
   * and the commits of the other must still be merged into its list); `merged` otherwise.
   */
  commitsByList(from = 0, to = this.length): { listed: PushCommits[]; merged: PushCommits[] } {
    const out = { listed: [] as PushCommits[], merged: [] as PushCommits[] };
    for (const c of this.commits) {
      if (c.row < from || c.row >= to) continue;
      const k = c.push.push;
      const repeated = this.#repeated.has(
        `${k.repositoryId}\u0000${k.ref}\u0000${k.before}\u0000${k.head}`,
      );
      (c.listed && !repeated ? out.listed : out.merged).push(c.push);
    }
    return out;
  }

  /** The COPY data of rows [from, to). */
  bytes(from = 0, to = this.length): Buffer {
    const end = to < this.length ? this.offsets[to]! : this.#end;
    return this.#buf.subarray(from < this.length ? this.offsets[from]! : end, end);
  }

  /** Empties the batch for reuse (its buffer stays). */
  clear(): void {
    this.#end = 0;
    this.offsets.length = 0;
    this.ids.length = 0;
    this.actorIds.length = 0;
    this.repositoryIds.length = 0;
    this.newActors.clear();
    this.newRepositories.clear();
    this.commits.length = 0;
    this.#keys.clear();
    this.#repeated.clear();
  }
}

function newest(m: Map<string, [string, number]>, id: string, name: string, at: number): void {
  const held = m.get(id);
  if (!held) m.set(id, [name, at]);
  else if (held[1] <= at) {
    held[0] = name;
    held[1] = at;
  }
}
