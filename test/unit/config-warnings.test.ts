import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/platform/config/config.ts';
import { configWarnings, logConfigWarnings } from '../../src/work/config-checks.ts';
import { configError } from '../support/config-error.ts';
import { memoryLogger } from '../support/github-client.ts';

/**
 * Settings valid alone that starve a function or switch it off (ADR 0181): each is said at
 * start in one line naming its variable; the defaults say nothing. The one that contradicts
 * itself (GraphQL's pacing past the claims' lease) is refused instead.
 */

const TOKEN = { GITHUB_TOKEN: 'ghp_warnings' };
const warnings = (env: Record<string, string>) => configWarnings(loadConfig({ ...TOKEN, ...env }));

describe('settings that warn at start', () => {
  it('the defaults warn of nothing, with a token or without one', () => {
    expect(warnings({})).toEqual([]);
    expect(configWarnings(loadConfig({}))).toEqual([]);
  });

  it('ENRICH_SHARE=0.9999999 leaves polls 1 request an hour of a token', () => {
    expect(warnings({ ENRICH_SHARE: '0.9999999' })).toEqual([
      {
        variable: 'ENRICH_SHARE',
        message: expect.stringMatching(
          /^ENRICH_SHARE=0\.9999999 leaves polls 1 request\(s\) an hour/,
        ),
      },
    ]);
    // 0.98 still leaves 100 an hour; 0.99 leaves 50, less than one source every 60 s.
    expect(warnings({ ENRICH_SHARE: '0.98' })).toEqual([]);
    expect(warnings({ ENRICH_SHARE: '0.99' })).toHaveLength(1);
  });

  it('an ENRICH_SHARE that leaves a credential no background request names it', () => {
    const [w] = configWarnings(loadConfig({ ENRICH_SHARE: '0.01' })); // anonymous: 60 × 0.01
    expect(w).toEqual({
      variable: 'ENRICH_SHARE',
      message: expect.stringMatching(/leaves anonymous no background request an hour/),
    });
    expect(warnings({ ENRICH_SHARE: '0.01' })).toEqual([]); // a token: 50 an hour
  });

  it('COMMITS_SHARE=0 says what it means now that shares are floors; 1 says it of enrichment', () => {
    expect(warnings({ COMMITS_SHARE: '0' })).toEqual([
      {
        variable: 'COMMITS_SHARE',
        message: expect.stringMatching(
          /gives commits no floor.*sent only while no profile is due for enrichment/,
        ),
      },
    ]);
    expect(warnings({ COMMITS_SHARE: '1' })).toEqual([
      {
        variable: 'COMMITS_SHARE',
        message: expect.stringMatching(/gives enrichment no floor/),
      },
    ]);
    expect(warnings({ COMMITS_SHARE: '0.001' })).toEqual([]);
  });

  it('a GraphQL pacing that lets a batch of queries outlive its claims warns; one query refused', () => {
    expect(warnings({ GRAPHQL_POINTS_PER_MINUTE: '4' })).toEqual([
      {
        variable: 'GRAPHQL_POINTS_PER_MINUTE',
        message: expect.stringMatching(/15 s apart a point.*ENRICH_LEASE_SECONDS 60 s.*5 or more/),
      },
    ]);
    expect(warnings({ GRAPHQL_POINTS_PER_MINUTE: '5' })).toEqual([]);
    expect(warnings({ GRAPHQL_POINTS_PER_MINUTE: '0' })).toEqual([]);
    const err = configError({ GRAPHQL_POINTS_PER_MINUTE: '20', ENRICH_LEASE_SECONDS: '3' });
    expect(err.variable).toBe('GRAPHQL_POINTS_PER_MINUTE');
    expect(err.message).toMatch(/3 s apart.*ENRICH_LEASE_SECONDS \(3 s\).*at least 21/);
  });

  it('each is one warn line at start, event config.warning, naming its variable', () => {
    const { logger, lines } = memoryLogger('debug');
    logConfigWarnings(logger, loadConfig({ ...TOKEN, COMMITS_SHARE: '0', ENRICH_SHARE: '0.999' }));
    const logged = lines.map((l) => JSON.parse(l));
    expect(logged.map((l) => [l.level, l.event, l.variable])).toEqual([
      ['warn', 'config.warning', 'ENRICH_SHARE'],
      ['warn', 'config.warning', 'COMMITS_SHARE'],
    ]);
  });
});
