import { describe, expect, it, vi } from 'vitest';
import { GitHubUnavailable, RateLimited } from '../../src/github/errors.ts';
import { talksTo } from '../../src/jobs/worker-service.ts';
import { createLogger, jobLogger, logDestination } from '../../src/platform/log.ts';
import { formatLogLine } from '../../src/platform/log-text.ts';
import { terminal } from '../../src/platform/terminal.ts';
import { memoryLogger } from '../support/github-client.ts';
import { visibleEscapes } from '../support/pty.ts';

/**
 * Quiet, useful logs by one mechanism in src/platform/log.ts (item 6), and the readable
 * form a terminal gets (item 3). Raw lines are checked, not parsed objects: a key printed
 * twice is invisible once JSON.parse has kept the last one.
 */

function rawLogger(level = 'info') {
  const { logger, lines } = memoryLogger(level);
  return { logger, raw: lines };
}

const occurrences = (line: string, key: string) => line.split(`"${key}":`).length - 1;

describe('expected failures', () => {
  const unavailable = () =>
    new GitHubUnavailable('/users/x', 502, 'HTTP 502', new Error('socket hang up'));

  it('log one line without a stack at info, and do not repeat the message', () => {
    const { logger, raw } = rawLogger('info');
    const err = unavailable();
    logger.warn({ event: 'enrichment.failed', err }, `actor 1 failed: ${err.message}`);
    const line = JSON.parse(raw[0]!);
    expect(line.err).toEqual({
      type: 'GitHubUnavailable',
      code: 'GITHUB_UNAVAILABLE',
      path: '/users/x',
      status: 502,
      cause: 'socket hang up', // the one thing the line's message does not say
    });
    expect(raw[0]).not.toMatch(/stack|at .*\.ts:\d+/);
  });

  it('keep the message when the line does not say it, with its causes', () => {
    const { logger, raw } = rawLogger('info');
    logger.warn({ event: 'x', err: unavailable() }, 'a request failed');
    expect(JSON.parse(raw[0]!).err.message).toBe(
      'GitHub unavailable on /users/x: HTTP 502: socket hang up',
    );
  });

  it('carry their stack at debug', () => {
    const { logger, raw } = rawLogger('debug');
    logger.warn({ err: new RateLimited(429, new Date(0), '/events') }, 'rate limited');
    expect(JSON.parse(raw[0]!).err.stack).toMatch(/^RateLimited: GitHub rate limit/);
  });

  it('count pg connection errors and network errors as expected too', () => {
    const { logger, raw } = rawLogger('info');
    const shutdown = Object.assign(
      new Error('terminating connection due to administrator command'),
      {
        code: '57P01',
      },
    );
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), {
      code: 'ECONNREFUSED',
    });
    logger.warn({ err: shutdown }, 'database connection failed');
    logger.warn({ err: refused }, 'database connection failed');
    for (const line of raw) expect(JSON.parse(line).err.stack).toBeUndefined();
  });

  it('while anything else keeps its stack at every level', () => {
    const { logger, raw } = rawLogger('info');
    logger.error({ err: new TypeError('x is undefined') }, 'job failed: x is undefined');
    const err = JSON.parse(raw[0]!).err;
    expect(err.stack).toMatch(/^TypeError: x is undefined\n\s+at /);
    expect(err.message).toBeUndefined(); // said by the line, and by the stack's first line
  });
});

describe('one job_id per line', () => {
  it('a field the logger is bound to is printed once, whoever adds it again', () => {
    const { logger, raw } = rawLogger();
    const job = jobLogger(logger, 'poll-sources', 'j-1');
    job.info({ event: 'ingestion.run_started', job_id: 'j-1', run_id: 5 }, 'started');
    job.child({ job_id: 'j-1' }).info({ event: 'github.request', job_id: 'j-1' }, 'request');
    job.info({ event: 'job.completed' }, 'done');
    expect(raw).toHaveLength(3);
    for (const line of raw) expect(occurrences(line, 'job_id')).toBe(1);
    for (const line of raw) expect(occurrences(line, 'queue')).toBe(1);
  });

  it('a different value is not hidden', () => {
    const { logger, raw } = rawLogger();
    jobLogger(logger, 'reconcile', 'j-1').info({ event: 'x', queue: 'enrich-actor' }, 'other');
    expect(JSON.parse(raw[0]!).queue).toBe('enrich-actor');
  });
});

describe('on a terminal', () => {
  it('formats a line for a person: time, level, message, event and fields', () => {
    const line = JSON.stringify({
      level: 'warn',
      time: '2026-11-30T08:16:05.000Z',
      pid: 1,
      event: 'ingestion.run_failed',
      run_id: 12,
      source: 'repo octocat/Hello-World',
      err: { type: 'GitHubUnavailable', code: 'GITHUB_UNAVAILABLE', status: 502 },
      msg: 'run 12 failed',
    });
    expect(formatLogLine(line)).toMatch(
      /^\d\d:\d\d:05 WARN {2}run 12 failed {2}ingestion\.run_failed err="GitHubUnavailable \[GITHUB_UNAVAILABLE\]" run_id=12 source="repo octocat\/Hello-World"\n$/,
    );
    const withStack = formatLogLine(
      JSON.stringify({
        level: 'error',
        msg: 'boom',
        err: { type: 'Error', stack: 'Error: boom\n    at x' },
      }),
    );
    expect(withStack.split('\n').slice(1, 3)).toEqual(['    Error: boom', '        at x']);
  });

  function fakeTty() {
    const written: string[] = [];
    return {
      written,
      stream: {
        isTTY: true,
        columns: 60,
        write: (s: string) => written.push(s) > 0,
      } as unknown as NodeJS.WriteStream,
    };
  }

  it('LOG_FORMAT=auto writes readable lines to a TTY, and LOG_FORMAT=json JSON', () => {
    const tty = fakeTty();
    createLogger('info', logDestination('auto', tty.stream)).info({ event: 'x' }, 'hello');
    expect(tty.written.join('')).toMatch(/^\S+ .*INFO.* hello {2}.*x/);
    const json = fakeTty();
    createLogger('info', logDestination('json', json.stream)).info({ event: 'x' }, 'hello');
    expect(JSON.parse(json.written.join(''))).toMatchObject({ event: 'x', msg: 'hello' });
  });

  it('log lines go above a status line, which is drawn again under them', () => {
    vi.stubEnv('NO_COLOR', '1');
    const tty = fakeTty();
    const logger = createLogger('info', logDestination('text', tty.stream));
    terminal.setStatus(tty.stream, '[####....] 1/2');
    logger.info('a log line');
    terminal.clearStatus();
    vi.unstubAllEnvs();
    expect(visibleEscapes(tty.written.join(''))).toMatch(
      /^\r<ESC>\[2K\[####\.\.\.\.\] 1\/2\r<ESC>\[2K\S+ INFO {2}a log line\n\[####\.\.\.\.\] 1\/2\r<ESC>\[2K$/,
    );
  });
});

describe("the worker's start line", () => {
  it('says live mode for github.com, else the API it talks to', () => {
    expect(talksTo('live', 'https://api.github.com')).toBe('live mode');
    expect(talksTo('live', 'http://127.0.0.1:38497')).toBe(
      'live, GitHub API at http://127.0.0.1:38497',
    );
    expect(talksTo('live', 'https://ghe.example.com/api/v3')).toBe(
      'live, GitHub API at https://ghe.example.com/api/v3',
    );
    expect(talksTo('fixture', 'https://api.github.com')).toBe('fixture mode');
  });
});
