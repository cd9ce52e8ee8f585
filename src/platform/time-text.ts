/**
 * A future time as a person reads it in a line: "20:35 UTC" when it is later today (UTC),
 * else with its date, "2058-09-21 20:35 UTC" (a block "until 20:35 UTC" that ends
 * in 2058 read like one ending tonight). Every deferral and block line uses it.
 */
export const DAY_MS = 86_400_000;

export function untilText(at: Date, now: Date): string {
  const iso = at.toISOString();
  const time = `${iso.slice(11, 16)} UTC`;
  const sameDay = iso.slice(0, 10) === now.toISOString().slice(0, 10);
  return sameDay && at.getTime() - now.getTime() < DAY_MS ? time : `${iso.slice(0, 10)} ${time}`;
}

/** True when `at` is a day or more after `now`: a relative "in 3d" then also gives the date. */
export function daysAhead(at: Date, now: Date): boolean {
  return at.getTime() - now.getTime() >= DAY_MS;
}
