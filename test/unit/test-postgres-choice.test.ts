import { describe, expect, it } from 'vitest';
import { holdsTestImages, startTestServer, type TestServer } from '../support/postgres-server.ts';

/**
 * Which Postgres `npm test` uses (item 9): TEST_POSTGRES chooses; unset, the
 * the documented order (docs/operations.md), where a Docker engine that cannot start the container falls back to
 * the embedded server instead of failing the run. The servers are stand-ins here: the real
 * paths run as the suite's own harness (CI: the machine's Postgres, then the plan tests on
 * the embedded one; docs/reliability.md records a testcontainers run).
 */

const server = (kind: TestServer['kind']): TestServer => ({
  adminUrl: `postgres://${kind}`,
  kind,
  description: kind,
  stop: async () => {},
});

function sources(env: NodeJS.ProcessEnv, o: { docker?: 'answers' | 'fails' | 'absent' } = {}) {
  const log: string[] = [];
  const started: string[] = [];
  return {
    log,
    started,
    sources: {
      env,
      log: (line: string) => log.push(line),
      dockerAnswers: async () => (o.docker ?? 'absent') !== 'absent',
      docker: async () => {
        started.push('docker');
        if (o.docker === 'fails') throw new Error('(HTTP code 500) pull access denied\nmore');
        return server('testcontainers');
      },
      embedded: async () => {
        started.push('embedded');
        return server('embedded');
      },
    },
  };
}

describe('TEST_POSTGRES and the harness order', () => {
  it('unset: TEST_DATABASE_URL first, then a working Docker engine, then embedded', async () => {
    const url = sources(
      { TEST_DATABASE_URL: 'postgres://u@h:5432/postgres' },
      { docker: 'answers' },
    );
    expect((await startTestServer(url.sources)).kind).toBe('env');
    expect(url.started).toEqual([]);
    const docker = sources({}, { docker: 'answers' });
    expect((await startTestServer(docker.sources)).kind).toBe('testcontainers');
    const none = sources({});
    expect((await startTestServer(none.sources)).kind).toBe('embedded');
    expect(none.started).toEqual(['embedded']);
  });

  it('unset: an engine that cannot start the container falls back to embedded and says why', async () => {
    const s = sources({}, { docker: 'fails' });
    expect((await startTestServer(s.sources)).kind).toBe('embedded');
    expect(s.started).toEqual(['docker', 'embedded']);
    expect(s.log).toEqual([
      expect.stringMatching(
        /^tests: testcontainers could not start postgres:18 \(\(HTTP code 500\) pull access denied\); falling back/,
      ),
    ]);
  });

  it('TEST_POSTGRES chooses, even over TEST_DATABASE_URL, and a chosen path that fails is an error', async () => {
    const url = 'postgres://u@h:5432/postgres';
    const embedded = sources({ TEST_POSTGRES: 'embedded', TEST_DATABASE_URL: url });
    expect((await startTestServer(embedded.sources)).kind).toBe('embedded');
    const docker = sources({ TEST_POSTGRES: 'docker' }, { docker: 'fails' });
    await expect(startTestServer(docker.sources)).rejects.toThrow(/pull access denied/);
    expect(docker.started).toEqual(['docker']);
    expect(
      (await startTestServer(sources({ TEST_POSTGRES: 'url', TEST_DATABASE_URL: url }).sources))
        .adminUrl,
    ).toBe(url);
    await expect(startTestServer(sources({ TEST_POSTGRES: 'url' }).sources)).rejects.toThrow(
      /TEST_POSTGRES=url needs TEST_DATABASE_URL/,
    );
    await expect(startTestServer(sources({ TEST_POSTGRES: 'podman' }).sources)).rejects.toThrow(
      /TEST_POSTGRES must be one of url, docker, embedded \(got "podman"\)/,
    );
  });
});

describe('the testcontainers path is tried only when the engine holds its images', () => {
  it('postgres:18 and a Ryuk image, or postgres:18 with Ryuk disabled', () => {
    const ryuk = 'testcontainers/ryuk:0.11.0';
    expect(holdsTestImages(['postgres:18', ryuk], {})).toBe(true);
    expect(holdsTestImages(['postgres:18'], {})).toBe(false);
    expect(holdsTestImages(['postgres:18'], { TESTCONTAINERS_RYUK_DISABLED: 'true' })).toBe(true);
    expect(holdsTestImages(['postgres:17', ryuk], {})).toBe(false);
    expect(holdsTestImages([], { TESTCONTAINERS_RYUK_DISABLED: 'true' })).toBe(false);
  });
});
