import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ROOT, runBin } from '../support/cli.ts';
import { adminQuery, withDatabase } from '../support/postgres-server.ts';

/**
 * The README's transcripts, run word for word on a database nobody has set up: every
 * `$ bin/…` line of its plain code blocks, in order, each one's stdout exactly the lines the
 * README shows under it (log lines — `HH:MM:SS LEVEL …` — are stderr and left out). A
 * newcomer copies these: "added source 2" must be what they get, and `bin/sources disable 2`
 * must then find source 2.
 */
interface Step {
  argv: string[];
  stdout: string[];
}

const LOG_LINE = /^\d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) /;

function readmeTranscript(readme: string): Step[] {
  const steps: Step[] = [];
  for (const block of readme.matchAll(/^```\n([\s\S]*?)^```$/gm)) {
    const lines = block[1]!.split('\n').filter((l) => l !== '');
    if (!lines[0]?.startsWith('$ bin/')) continue;
    for (const line of lines) {
      if (line.startsWith('$ ')) {
        steps.push({ argv: line.slice(2).split(/\s+/), stdout: [] });
      } else if (!LOG_LINE.test(line)) {
        steps.at(-1)!.stdout.push(line);
      }
    }
  }
  return steps;
}

const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
const steps = readmeTranscript(readme);

const { adminUrl, runId } = inject('testDb');
const name = `gpi_${runId}_empty_${randomBytes(3).toString('hex')}`;
beforeAll(() => adminQuery(adminUrl, `CREATE DATABASE ${name}`));
afterAll(() => adminQuery(adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));

describe("the README's transcripts, on a database nobody has set up", () => {
  it('are there to run (the first session and adding a source)', () => {
    const commands = steps.map((s) => s.argv.join(' '));
    expect(commands).toContain('bin/setup');
    expect(commands).toContain('bin/sources add repo octocat/Hello-World');
    expect(commands).toContain('bin/sources disable 2');
  });

  it('print exactly what the README shows, step by step', async () => {
    // No GITHUB_TOKEN or SOURCES from the shell: the README's reader has none.
    const env = {
      DATABASE_URL: withDatabase(adminUrl, name),
      SOURCES: undefined,
      GITHUB_TOKEN: undefined,
      GITHUB_TOKENS: undefined,
      GITHUB_APP_ID: undefined,
      LOG_LEVEL: 'info',
      // The README shows a terminal's readable lines; here stderr is a pipe.
      LOG_FORMAT: 'text',
    };
    for (const step of steps) {
      const [bin, ...argv] = step.argv;
      const r = await runBin(bin!.replace(/^bin\//, ''), argv, env);
      const what = step.argv.join(' ');
      // What a terminal shows that is not a log line: a command's refusal (stderr), then its
      // results (stdout).
      const said = (text: string) => text.split('\n').filter((l) => l !== '' && !LOG_LINE.test(l));
      expect({ what, printed: [...said(r.err), ...said(r.out)] }).toEqual({
        what,
        printed: step.stdout,
      });
    }
  }, 120_000);
});
