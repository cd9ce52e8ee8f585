import { describe, expect, it } from 'vitest';
import {
  BatchHistory,
  CommitsPerPush,
  chooseFirstRound,
  expectedPoints,
  GRAPHQL_MAX_BATCH,
} from '../../src/commits/graphql/sizing.ts';

/**
 * How big a GraphQL batch is and how deep its first round reads (ADR 0183): the model
 * that decides both, over GitHub's commits per push and what a process learns of its own.
 */

describe('the first round', () => {
  it('few pushes are each read deep with their base, in one query; many by their head and parents', () => {
    const github = new CommitsPerPush();
    // two pushes: one query of 149 requests holds 72 commits and the base's page of each
    expect(chooseFirstRound(2, github)).toEqual({ walk: 72, withBase: true });
    expect(chooseFirstRound(10, github)).toEqual({ walk: 12, withBase: true });
    // a thousand: 78% of GitHub's pushes are one commit, proven by the head's parents alone
    expect(chooseFirstRound(1000, github)).toEqual({ walk: 1, withBase: false });
  });

  it('learns the mix: where most pushes carry five commits, a big batch reads five at once', () => {
    const learned = new CommitsPerPush(false);
    for (let i = 0; i < 1000; i++) learned.add(i % 10 === 0 ? 1 : 5);
    const plan = chooseFirstRound(1000, learned);
    expect(plan.walk).toBeGreaterThanOrEqual(5);
    const github = chooseFirstRound(1000, new CommitsPerPush());
    expect(expectedPoints(1000, plan, learned.entries())).toBeLessThan(
      expectedPoints(1000, github, learned.entries()),
    );
  });

  it('pushes a point grow with the batch: the rounds, not the pushes, are what a small batch pays', () => {
    const dist = new CommitsPerPush().entries();
    const rate = (n: number) => n / expectedPoints(n, chooseFirstRound(n, dist), dist);
    expect(rate(50)).toBeLessThan(20);
    expect(rate(GRAPHQL_MAX_BATCH)).toBeGreaterThan(25);
    expect(rate(200)).toBeGreaterThan(rate(50));
    expect(rate(GRAPHQL_MAX_BATCH)).toBeGreaterThan(rate(200));
  });
});

describe('the batch size', () => {
  it('takes the room when the points allow, never more than the most a batch takes', () => {
    const h = new BatchHistory();
    expect(h.batchSize({ room: 70, pointsLeft: 5000 })).toBe(70);
    expect(h.batchSize({ room: 10_000, pointsLeft: null })).toBe(GRAPHQL_MAX_BATCH);
  });

  it('no more pushes than the points left pay for', () => {
    const h = new BatchHistory();
    const n = h.batchSize({ room: 1000, pointsLeft: 5 });
    expect(n).toBeGreaterThan(1);
    expect(n).toBeLessThan(1000);
    const dist = h.sizes.entries();
    expect(expectedPoints(n, chooseFirstRound(n, dist), dist)).toBeLessThanOrEqual(5);
    expect(h.batchSize({ room: 1000, pointsLeft: 0 })).toBe(1);
  });

  it('learns from the batches it settles', () => {
    const h = new BatchHistory();
    const before = chooseFirstRound(1000, h.sizes);
    for (let i = 0; i < 10; i++) h.record(Array.from({ length: 1000 }, (_, k) => (k % 10 ? 5 : 1)));
    expect(chooseFirstRound(1000, h.sizes).walk).toBeGreaterThan(before.walk);
  });
});
