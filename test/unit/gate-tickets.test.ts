import { describe, expect, it } from 'vitest';
import { GateTickets, WatchedGates } from '../../src/budget/gate-tickets.ts';

/** ADR 0140: one of a round's polls at a gate per credential; the rest wait holding nothing. */

describe('GateTickets', () => {
  it('hands out its capacity, then one ticket per ticket given back, in order', async () => {
    const t = new GateTickets(2);
    const a = await t.take();
    const b = await t.take();
    expect(t.free).toBe(0);
    const order: string[] = [];
    const taken = (name: string) => (give: () => void) => {
      order.push(name);
      return give;
    };
    const c = t.take().then(taken('c'));
    const d = t.take().then(taken('d'));
    await Promise.resolve();
    expect(order).toEqual([]);
    a();
    a(); // twice is once
    const giveC = await c;
    expect(order).toEqual(['c']);
    b();
    const giveD = await d;
    expect(order).toEqual(['c', 'd']);
    giveC();
    giveD();
    expect(t.free).toBe(2);
  });

  it('never has less than one ticket', async () => {
    const t = new GateTickets(0);
    expect(t.free).toBe(1);
    (await t.take())();
  });
});

describe('WatchedGates', () => {
  it('says once, when it empties after arm(): not for the tries of the opening transaction', () => {
    let fired = 0;
    const g = new WatchedGates(() => fired++);
    g.add(1);
    g.delete(1); // a busy gate's try, before arming
    g.add(2);
    expect(fired).toBe(0);
    g.arm();
    expect(fired).toBe(0);
    g.delete(3); // not held: nothing
    expect(fired).toBe(0);
    g.delete(2);
    expect(fired).toBe(1);
    g.add(4);
    g.delete(4);
    expect(fired).toBe(1);
  });

  it('armed with nothing held, it says so at once', () => {
    let fired = 0;
    new WatchedGates(() => fired++).arm();
    expect(fired).toBe(1);
  });
});
