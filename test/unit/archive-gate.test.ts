import { describe, expect, it } from 'vitest';
import { ArchiveBusy, createArchiveGate } from '../../src/web/archive-gate.ts';

/**
 * /archive's share of bin/web (ADR 0185): `slots` requests use the database at once, `queue`
 * more wait in order, and past either (or past the wait) a request is refused with
 * ArchiveBusy, which the route answers 503 with Retry-After.
 */

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe('the archive gate', () => {
  it('runs `slots` at once, queues `queue` more in order, and refuses the rest at once', async () => {
    const gate = createArchiveGate({ slots: 2, queue: 2, waitMs: 60_000, waiting: 1 });
    const held = [deferred(), deferred()];
    const order: string[] = [];
    const running = held.map((d, i) =>
      gate.withSlot(async () => {
        order.push(`run ${i}`);
        await d.promise;
      }),
    );
    const queued = ['q0', 'q1'].map((name) => gate.withSlot(async () => void order.push(name)));
    await expect(gate.withSlot(async () => 'never')).rejects.toBeInstanceOf(ArchiveBusy);
    expect(gate.stats()).toMatchObject({ slots: 2, inUse: 2, queued: 2, refused: 1 });
    expect(order).toEqual(['run 0', 'run 1']);

    held[0]!.resolve();
    held[1]!.resolve();
    await Promise.all([...running, ...queued]);
    expect(order).toEqual(['run 0', 'run 1', 'q0', 'q1']);
    expect(gate.stats()).toMatchObject({ inUse: 0, queued: 0 });
    // Free again: a request runs at once.
    expect(await gate.withSlot(async () => 'ran')).toBe('ran');
  });

  it('refuses a request that waited its whole wait, and gives its place up', async () => {
    const gate = createArchiveGate({ slots: 1, queue: 4, waitMs: 20, waiting: 1 });
    const held = deferred();
    const running = gate.withSlot(() => held.promise);
    const late = gate.withSlot(async () => 'never');
    const err = await late.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ArchiveBusy);
    expect((err as ArchiveBusy).retryAfterSeconds).toBeGreaterThan(0);
    expect(gate.stats()).toMatchObject({ inUse: 1, queued: 0 });
    held.resolve();
    await running;
    expect(gate.stats().inUse).toBe(0);
  });

  it('frees the slot when the work fails', async () => {
    const gate = createArchiveGate({ slots: 1, queue: 0, waitMs: 1_000, waiting: 1 });
    await expect(gate.withSlot(async () => Promise.reject(new Error('boom')))).rejects.toThrow(
      'boom',
    );
    expect(await gate.withSlot(async () => 'ran')).toBe('ran');
  });

  it('bounds the requests waiting for a build, which hold no slot', async () => {
    const gate = createArchiveGate({ slots: 1, queue: 0, waitMs: 1_000, waiting: 1 });
    const build = deferred();
    const waiter = gate.waitFor(build.promise);
    await expect(gate.waitFor(build.promise)).rejects.toBeInstanceOf(ArchiveBusy);
    // Waiting holds no slot: a lookup runs meanwhile.
    expect(await gate.withSlot(async () => 'ran')).toBe('ran');
    build.resolve();
    await waiter;
    expect(gate.stats().waiting).toBe(0);
  });
});
