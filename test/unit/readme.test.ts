import { readdirSync, readFileSync, statSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ENV_VARS } from '../../src/config.ts';
import { ROOT, runBin } from '../support/cli.ts';

/**
 * README.md stays true to the code (issue 11, item 11): every variable the config reads is
 * in the configuration table, every executable in bin/ is in the command table, and every
 * flag its --help lists is in its row.
 */

const readme = readFileSync(`${ROOT}README.md`, 'utf8');
const executables = readdirSync(`${ROOT}bin`).filter((f) => statSync(`${ROOT}bin/${f}`).isFile());

function commandRow(name: string): string {
  const rows = readme
    .slice(readme.indexOf('## Commands'))
    .split('\n')
    .filter((l) => l.startsWith('| ') && l.includes(`bin/${name}`));
  expect(rows, `README's command table has no row for bin/${name}`).not.toHaveLength(0);
  return rows.join('\n');
}

describe('README.md', () => {
  it('documents every environment variable the config reads', () => {
    const table = readme.slice(readme.indexOf('## Configuration'), readme.indexOf('## Commands'));
    // The first cell of each row names the variable(s): `HTTP_HOST` / `HTTP_PORT`.
    const names = table
      .split('\n')
      .filter((l) => l.startsWith('| `'))
      .map((l) => l.split('|')[1]!);
    const missing = ENV_VARS.filter((v) => !names.some((cell) => cell.includes(`\`${v}\``)));
    expect(missing).toEqual([]);
  });

  it.each(executables)(
    'has bin/%s and every flag of its --help in the command table',
    async (name) => {
      const help = await runBin(name, ['--help'], {});
      expect(help.code, help.err).toBe(0);
      const flags = [...new Set(help.out.match(/--[a-z][a-z-]+/g) ?? [])].filter(
        (f) => f !== '--help',
      );
      const row = commandRow(name);
      for (const flag of flags) expect(row, `bin/${name} ${flag}`).toContain(flag);
    },
  );
});
