import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/platform/config/config.ts';
import { ConfigError } from '../../src/platform/errors.ts';
import { hasUserinfo, withoutUserinfo } from '../../src/platform/redact.ts';
import { memoryLogger } from '../support/github-client.ts';

/** One function removes a URL's userinfo wherever a URL is shown or stored. */

describe('withoutUserinfo', () => {
  it.each([
    [
      'http://user:pw@127.0.0.1:8080/2026-11-20-4.json.gz',
      'http://127.0.0.1:8080/2026-11-20-4.json.gz',
    ],
    ['https://token@mirror.example.org', 'https://mirror.example.org'],
    ['postgres://app:s3cret@db:5432/gpi?sslmode=require', 'postgres://db:5432/gpi?sslmode=require'],
    // A raw @ in the password: everything up to the last @ of the authority goes.
    ['http://u:p@ss@host/x', 'http://host/x'],
    ['http://u:p%40ss@host', 'http://host'],
    // Two URLs in a message, and what is not a userinfo stays.
    [
      'mirrors http://a:1@x.org, https://b:2@y.org/z failed; mail ops@example.org',
      'mirrors http://x.org, https://y.org/z failed; mail ops@example.org',
    ],
    ['http://host/path?email=a@b.c#frag@x', 'http://host/path?email=a@b.c#frag@x'],
    ['http://host', 'http://host'],
    ['no url at all, a@b', 'no url at all, a@b'],
  ])('%s', (input, output) => {
    expect(withoutUserinfo(input)).toBe(output);
    expect(hasUserinfo(input)).toBe(input !== output);
  });

  it('never reaches across a JSON string: a log line stays valid JSON', () => {
    const line = JSON.stringify({
      mirror: 'http://u:SENTINEL@127.0.0.1:1',
      url: 'http://127.0.0.1:2',
      login: 'me@example.org',
      nested: { err: 'GET https://x:SENTINEL@h/p: 503' },
    });
    const out = withoutUserinfo(line);
    expect(out).not.toContain('SENTINEL');
    expect(JSON.parse(out)).toEqual({
      mirror: 'http://127.0.0.1:1',
      url: 'http://127.0.0.1:2',
      login: 'me@example.org',
      nested: { err: 'GET https://h/p: 503' },
    });
  });
});

describe('the logger', () => {
  it('removes the userinfo from every line, whatever field or message carries it', () => {
    const { logger, lines } = memoryLogger('info');
    logger.warn(
      {
        event: 'backfill.file_failed',
        file: 'http://u:SENTINEL@127.0.0.1:9/2026-11-20-4.json.gz',
        err: new Error('connect ECONNREFUSED for http://u:SENTINEL@127.0.0.1:9/'),
      },
      'http://u:SENTINEL@127.0.0.1:9/2026-11-20-4.json.gz: failed',
    );
    expect(lines).toHaveLength(1);
    expect(lines[0]).not.toContain('SENTINEL');
    expect(JSON.parse(lines[0]!).msg).toBe('http://127.0.0.1:9/2026-11-20-4.json.gz: failed');
  });
});

describe('configuration', () => {
  it('serializes a URL with a userinfo, so an odd password is still found and removed', () => {
    const c = loadConfig({
      GHARCHIVE_URL: 'http://reader:pa"ss word@127.0.0.1:1/,http://127.0.0.1:2',
      GITHUB_API_URL: 'http://proxy:pa"ss@127.0.0.1:3/api/',
    });
    expect(c.archive.mirrors).toEqual([
      'http://reader:pa%22ss%20word@127.0.0.1:1',
      'http://127.0.0.1:2',
    ]);
    expect(c.github.apiUrl).toBe('http://proxy:pa%22ss@127.0.0.1:3/api');
    expect(withoutUserinfo(c.archive.mirrors[0]!)).toBe('http://127.0.0.1:1');
  });

  it('keeps one entry per mirror: two passwords for one mirror are one mirror', () => {
    const c = loadConfig({ GHARCHIVE_URL: 'http://a:1@m.example.org,http://a:2@m.example.org' });
    expect(c.archive.mirrors).toEqual(['http://a:1@m.example.org']);
  });

  it('quotes a bad URL without its userinfo', () => {
    for (const [name, value] of [
      ['GITHUB_API_URL', 'ftp://u:SENTINEL@h.example.org'],
      ['GHARCHIVE_URL', 'https://ok.example.org,s3://u:SENTINEL@bucket/x'],
    ] as const) {
      try {
        loadConfig({ [name]: value });
        expect.unreachable();
      } catch (err) {
        expect(err).toBeInstanceOf(ConfigError);
        expect((err as Error).message).toMatch(
          /\(got "(ftp|s3):\/\/(h\.example\.org|bucket\/x)"\)/,
        );
        expect((err as Error).message).not.toContain('SENTINEL');
      }
    }
  });
});
