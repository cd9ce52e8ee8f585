import type { EntityClass } from '../budget/types.ts';

/** The pg-boss queues: names users see in `psql` and in every job log line. */
export const QUEUES = {
  pollSources: 'poll-sources',
  enrichActor: 'enrich-actor',
  enrichRepository: 'enrich-repository',
  reconcile: 'reconcile',
  maintenance: 'maintenance',
  backfill: 'backfill',
  /** Hinted after a transaction stored pending pushes; handler: src/commits. */
  fetchCommits: 'fetch-commits',
} as const;

export type QueueName = (typeof QUEUES)[keyof typeof QUEUES];

export const ALL_QUEUES: readonly QueueName[] = Object.values(QUEUES);

/** The queue whose cycles enrich `cls`. */
export function enrichQueue(cls: EntityClass): QueueName {
  return cls === 'actor' ? QUEUES.enrichActor : QUEUES.enrichRepository;
}
