import { describe, expect, it } from 'vitest';
import { HARNESS_DATABASE } from '../support/global-setup.ts';

/**
 * The test harness drops its own leftover databases (older than 3 h) on the server it is
 * given — which may be a developer's own Postgres. It must recognise only the names it
 * makes: a user's `gpi_something` database on the same server was dropped once.
 */
describe('leftover databases the harness may drop', () => {
  const stamp = Math.floor(Date.now() / 1000).toString(36);
  const pid = (4242).toString(36);

  it('are the names the harness and the bench make', () => {
    for (const name of [
      `gpi_${stamp}_${pid}_tpl`,
      `gpi_${stamp}_${pid}_0a1b2c3d`,
      `gpi_${stamp}_${pid}_empty_a1b2c3`,
      `gpi_${stamp}_bench`,
    ]) {
      expect(HARNESS_DATABASE.exec(name)?.[1], name).toBe(stamp);
    }
  });

  it('are never a database of someone else that only starts with gpi_', () => {
    for (const name of ['gpi_lead9', 'gpi_issue10', 'gpi_prod', 'gpi_prod_db', 'gpi_x_y_tpl']) {
      expect(HARNESS_DATABASE.test(name), name).toBe(false);
    }
  });
});
