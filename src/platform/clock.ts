/** Injectable time source: services take a Clock so tests can move time. */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

/** A clock tests control. */
export function fixedClock(start: Date | string = '2026-01-01T00:00:00Z') {
  let t = new Date(start).getTime();
  return {
    now: () => new Date(t),
    advance(ms: number) {
      t += ms;
    },
    set(d: Date | string) {
      t = new Date(d).getTime();
    },
  };
}
