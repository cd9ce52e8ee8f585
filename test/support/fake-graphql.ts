import { type DocumentNode, execute, GraphQLError, parse, validate } from 'graphql';
import type { BucketOf, FakeGraphQLControls, RateLimitSetting } from './fake-github-types.ts';
import { analyzeQuery, type GitHubErrorJson, type QueryAnalysis } from './fake-graphql-cost.ts';
import {
  type ExecContext,
  fieldResolver,
  GitHubGraphQLError,
  type RepoLookup,
  rootValue,
} from './fake-graphql-resolvers.ts';
import { githubSchema } from './fake-graphql-schema.ts';

/**
 * `POST /graphql` of the fake GitHub, by GitHub's rules ("Rate limits and query limits for
 * the GraphQL API"; fixtures/github/GRAPHQL.md says what each knob does):
 *
 * - a token is required (401 without one); a parse or schema error, missing or excessive
 *   pagination, or more than 500,000 nodes is a 200 with `errors` and no `data`, run
 *   nothing and costs nothing;
 * - a query costs its points (fake-graphql-cost.ts) in a window of its own per credential
 *   (5,000 an hour for a token; an installation's own limit), reported in `x-ratelimit-*`
 *   with `x-ratelimit-resource: graphql` and in `rateLimit { … }`. With no point left the
 *   answer is a 200 whose error is of type `RATE_LIMIT` (code `graphql_rate_limit`), as
 *   GitHub answers now (it used to say `RATE_LIMITED`: `rateLimitedType` picks). `used`
 *   may pass the limit: GitHub runs a query while one point is left and charges it whole;
 * - the secondary limit: 2,000 secondary points a minute per credential, a query 1 and a
 *   mutation 5 (GitHub's table; NOT the primary cost): past it a 403 with retry-after: 60;
 * - a query too heavy (the `resourceLimits` knob: nodes or top-level fields) is answered
 *   in part: the top-level fields past the threshold are null with a
 *   `RESOURCE_LIMITS_EXCEEDED` error at their first connection (or at the field itself);
 * - a query slower than 10 s (`queryDelayMs` against `timeoutMs`) is a 502 after 10 s and
 *   costs its points (GitHub since 2025-07-21); `fail()` injects 502s on demand.
 */

export interface GraphQLKnobs {
  /** Secondary points a credential may spend in any 60 s (GitHub: 2,000). */
  secondaryPointsPerMinute: number;
  nodeLimit: number;
  /** GitHub stops a query after 10 s and answers 502. */
  timeoutMs: number;
  /** How long a query takes to run (a number, or from its shape). */
  queryDelayMs: number | ((q: QueryAnalysis) => number);
  /** Past either threshold, the fields after it are refused (a partial answer). */
  resourceLimits: { nodes?: number; topLevelFields?: number } | null;
  rateLimitedType: 'RATE_LIMIT' | 'RATE_LIMITED';
  /**
   * A hostile proxy's answers (never GitHub's): each 200 with data padded to this many bytes
   * by a string under `extensions`, which nothing reads (0: no padding).
   */
  padAnswerTo: number;
  /** A hostile proxy's `rateLimit.cost` in place of the query's true cost (null: the truth). */
  claimedCost: number | null /**
   * A test's signal: every query is answered only once this settles (after its delay), so
   * a test can order what happens while a query is out without racing a fixed delay.
   */;
  answerAfter: Promise<unknown> | null;
}

export const DEFAULT_KNOBS: GraphQLKnobs = {
  secondaryPointsPerMinute: 2000,
  nodeLimit: 500_000,
  timeoutMs: 10_000,
  queryDelayMs: 0,
  resourceLimits: null,
  rateLimitedType: 'RATE_LIMIT',
  padAnswerTo: 0,
  claimedCost: null,
  answerAfter: null,
};

export interface GraphQLFault {
  /** Default 502. */
  status?: number;
  /** How many queries it applies to (default 1; Infinity for all). */
  times?: number;
  /** Wait this long first (a timeout: `timeoutMs`). */
  delayMs?: number;
  /** Raw body (default GitHub's GraphQL "Something went wrong" error JSON). */
  body?: string;
  /** Spend the query's points, as a timeout does (default: false). */
  chargePoints?: boolean;
}

export interface GraphQLRecord {
  credential: string;
  query: string;
  variables: Record<string, unknown>;
  status: number;
  /** Points charged to the window (0 when refused before running). */
  charged: number;
  /** The query's computed cost and node count (null when it did not parse or validate). */
  cost: number | null;
  nodeCount: number | null;
  errorTypes: string[];
  at: Date;
}

export interface GraphQLBucket {
  limit: number;
  remaining: number;
  used: number;
  resetAt: Date;
}

export interface GraphQLAnswer {
  status: number;
  body: string;
  headers: Record<string, string>;
}

export interface GraphQLRequest {
  credential: string;
  bucket: GraphQLBucket | null;
  body: string;
  requestId: string;
  lookup: (owner: string, name: string) => RepoLookup;
  sleep: (ms: number) => Promise<void>;
}

const DOCS = 'https://docs.github.com/graphql';

export function graphqlHeaders(b: GraphQLBucket): Record<string, string> {
  return {
    'x-ratelimit-limit': String(b.limit),
    'x-ratelimit-remaining': String(b.remaining),
    'x-ratelimit-reset': String(Math.floor(b.resetAt.getTime() / 1000)),
    'x-ratelimit-used': String(b.used),
    'x-ratelimit-resource': 'graphql',
  };
}

function errorJson(e: GraphQLError | GitHubErrorJson): GitHubErrorJson {
  if (!(e instanceof GraphQLError)) return e;
  const type = e.originalError instanceof GitHubGraphQLError ? e.originalError.type : undefined;
  return {
    ...(type ? { type } : {}),
    ...(e.path ? { path: [...e.path] } : {}),
    ...(e.locations ? { locations: [...e.locations] } : {}),
    message: e.message,
  };
}

const nextHour = () => new Date(Math.ceil((Date.now() + 1) / 1000) * 1000 + 3600_000);

export function fakeGraphQL(o: { limitFor: (credential: string) => number }) {
  let knobs: GraphQLKnobs = { ...DEFAULT_KNOBS };
  const buckets = new Map<string, GraphQLBucket>();
  let override: (RateLimitSetting & { used?: number }) | null = null;

  /** A credential's points window, renewed an hour after it began. */
  function bucketFor(credential: string): GraphQLBucket {
    let b = buckets.get(credential);
    if (!b) {
      const limit = override?.limit ?? o.limitFor(credential);
      const used = override?.used ?? 0;
      b = {
        limit,
        used,
        remaining: override?.remaining ?? Math.max(0, limit - used),
        resetAt: override?.resetAt ?? nextHour(),
      };
      buckets.set(credential, b);
    }
    if (Date.now() >= b.resetAt.getTime()) {
      b.remaining = b.limit;
      b.used = 0;
      b.resetAt = nextHour();
    }
    return b;
  }

  let faults: (GraphQLFault & { left: number })[] = [];
  const records: GraphQLRecord[] = [];
  const secondary = new Map<string, { at: number; points: number }[]>();

  /** Counts this request's secondary points; true when the minute is over its limit. */
  function overSecondary(credential: string, points: number, at: number): boolean {
    const window = (secondary.get(credential) ?? []).filter((x) => x.at > at - 60_000);
    window.push({ at, points });
    secondary.set(credential, window);
    return window.reduce((n, x) => n + x.points, 0) > knobs.secondaryPointsPerMinute;
  }

  function plan(a: QueryAnalysis): { failKeys: Set<string>; failDeep: Set<string> } {
    const failKeys = new Set<string>();
    const failDeep = new Set<string>();
    const limits = knobs.resourceLimits;
    if (!limits) return { failKeys, failDeep };
    let nodes = 0;
    let fields = 0;
    for (const f of a.topLevel) {
      if (f.key === 'rateLimit') continue;
      nodes += f.nodes;
      fields++;
      const over =
        (limits.nodes !== undefined && nodes > limits.nodes) ||
        (limits.topLevelFields !== undefined && fields > limits.topLevelFields);
      if (!over) continue;
      failKeys.add(f.key);
      if (f.hasConnection) failDeep.add(f.key);
    }
    return { failKeys, failDeep };
  }

  async function handle(r: GraphQLRequest): Promise<GraphQLAnswer> {
    const at = Date.now();
    const headers: Record<string, string> = r.bucket ? graphqlHeaders(r.bucket) : {};
    const record: GraphQLRecord = {
      credential: r.credential,
      query: '',
      variables: {},
      status: 200,
      charged: 0,
      cost: null,
      nodeCount: null,
      errorTypes: [],
      at: new Date(at),
    };
    records.push(record);
    const answer = (status: number, value: unknown, extra: Record<string, string> = {}) => {
      record.status = status;
      const errors = (value as { errors?: GitHubErrorJson[] }).errors ?? [];
      record.errorTypes = errors.map((e) => e.type ?? 'ERROR');
      const h = r.bucket ? graphqlHeaders(r.bucket) : headers;
      return {
        status,
        body: typeof value === 'string' ? value : JSON.stringify(value),
        headers: { ...h, ...extra },
      };
    };
    if (!r.bucket) {
      return answer(401, {
        message: 'This endpoint requires you to be authenticated.',
        documentation_url: `${DOCS}/guides/forming-calls-with-graphql#authenticating-with-graphql`,
        status: '401',
      });
    }
    const bucket = r.bucket;
    // Every request spends secondary points, whether or not it runs (a mutation 4 more).
    if (overSecondary(r.credential, 1, at)) {
      return answer(
        403,
        {
          message: `You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID ${r.requestId}.`,
          documentation_url: `${DOCS}/overview/rate-limits-and-query-limits-for-the-graphql-api#secondary-rate-limits`,
        },
        { 'retry-after': '60' },
      );
    }
    let body: { query?: unknown; variables?: unknown; operationName?: unknown };
    try {
      body = JSON.parse(r.body);
    } catch {
      return answer(400, {
        message: 'Problems parsing JSON',
        documentation_url: DOCS,
        status: '400',
      });
    }
    if (typeof body?.query !== 'string')
      return answer(200, {
        errors: [{ message: 'A query attribute must be specified and must be a string.' }],
      });
    const variables =
      body.variables && typeof body.variables === 'object'
        ? (body.variables as Record<string, unknown>)
        : {};
    record.query = body.query;
    record.variables = variables;
    const operationName = typeof body.operationName === 'string' ? body.operationName : undefined;

    let document: DocumentNode;
    try {
      document = parse(body.query);
    } catch (err) {
      return answer(200, { errors: [errorJson(err as GraphQLError)] });
    }
    const invalid = validate(githubSchema(), document);
    if (invalid.length > 0) return answer(200, { errors: invalid.map(errorJson) });
    const a = analyzeQuery(githubSchema(), document, {
      variables,
      operationName,
      nodeLimit: knobs.nodeLimit,
    });
    record.cost = a.cost;
    record.nodeCount = a.nodeCount;

    if (a.isMutation) secondary.get(r.credential)?.push({ at, points: 4 });
    if (a.errors.length > 0) return answer(200, { errors: a.errors });
    if (bucket.remaining <= 0) {
      return answer(200, {
        errors: [
          knobs.rateLimitedType === 'RATE_LIMIT'
            ? {
                type: 'RATE_LIMIT',
                code: 'graphql_rate_limit',
                message: `API rate limit already exceeded for ${r.credential}.`,
              }
            : { type: 'RATE_LIMITED', message: `API rate limit exceeded for ${r.credential}.` },
        ],
      });
    }
    const charge = () => {
      if (a.dryRun || record.charged > 0) return;
      bucket.used += a.cost;
      bucket.remaining = Math.max(0, bucket.remaining - a.cost);
      record.charged = a.cost;
    };

    const fault = faults.find((f) => f.left > 0);
    if (fault) {
      fault.left--;
      faults = faults.filter((f) => f.left > 0);
      if (fault.delayMs) await r.sleep(fault.delayMs);
      if (fault.chargePoints) charge();
      return answer(fault.status ?? 502, fault.body ?? somethingWentWrong(r.requestId));
    }
    const delay =
      typeof knobs.queryDelayMs === 'function' ? knobs.queryDelayMs(a) : knobs.queryDelayMs;
    if (delay >= knobs.timeoutMs) {
      await r.sleep(knobs.timeoutMs);
      charge();
      return answer(502, somethingWentWrong(r.requestId));
    }
    if (delay > 0) await r.sleep(delay);
    if (knobs.answerAfter) await knobs.answerAfter;
    charge();

    const { failKeys, failDeep } = plan(a);
    const ctx: ExecContext = {
      lookup: r.lookup,
      rateLimit: {
        cost: knobs.claimedCost ?? a.cost,
        limit: bucket.limit,
        remaining: bucket.remaining,
        used: bucket.used,
        resetAt: bucket.resetAt,
        nodeCount: a.nodeCount,
      },
      failKeys,
      failDeep,
      dryRun: a.dryRun,
    };
    const result = await execute({
      schema: githubSchema(),
      document,
      rootValue: rootValue(),
      contextValue: ctx,
      variableValues: variables,
      operationName,
      fieldResolver,
    });
    const out: { data?: unknown; errors?: GitHubErrorJson[]; extensions?: { pad: string } } = {};
    if (result.data !== undefined) out.data = result.data;
    if (result.errors?.length) out.errors = result.errors.map(errorJson);
    const text = JSON.stringify(out);
    // `,"extensions":{"pad":""}` is 24 bytes, before the closing brace.
    const pad = knobs.padAnswerTo - text.length - 24;
    if (pad <= 0) return answer(200, out);
    const padded = answer(200, `${text.slice(0, -1)},"extensions":{"pad":"${'x'.repeat(pad)}"}}`);
    record.errorTypes = (out.errors ?? []).map((e) => e.type ?? 'ERROR');
    return padded;
  }

  function controls(keyOf: (o?: BucketOf) => string): FakeGraphQLControls {
    return {
      configure(k) {
        knobs = { ...knobs, ...k };
      },
      fail(f) {
        faults.push({ ...f, left: f.times ?? 1 });
      },
      rateLimit: (b) => ({ ...bucketFor(keyOf(b)) }),
      setRateLimit(setting, b) {
        const apply = (x: GraphQLBucket) => {
          if (setting.limit !== undefined) x.limit = setting.limit;
          if (setting.used !== undefined) x.used = setting.used;
          if (setting.remaining !== undefined) x.remaining = setting.remaining;
          else if (setting.limit !== undefined || setting.used !== undefined)
            x.remaining = Math.max(0, x.limit - x.used);
          if (setting.resetAt !== undefined) x.resetAt = setting.resetAt;
        };
        if (b?.token !== undefined || b?.installation !== undefined) {
          apply(bucketFor(keyOf(b)));
          return;
        }
        override = { ...override, ...setting };
        for (const x of buckets.values()) apply(x);
      },
      get queries() {
        return records;
      },
      pointsSpent: (b) => {
        const key = b ? keyOf(b) : null;
        return records
          .filter((r) => key === null || r.credential === key)
          .reduce((n, r) => n + r.charged, 0);
      },
    };
  }

  return {
    handle,
    bucketFor,
    controls,
    reset(): void {
      knobs = { ...DEFAULT_KNOBS };
      buckets.clear();
      override = null;
      faults = [];
      records.length = 0;
      secondary.clear();
    },
  };
}

function somethingWentWrong(requestId: string): string {
  return JSON.stringify({
    data: null,
    errors: [
      {
        message: `Something went wrong while executing your query. This may be the result of a timeout, or it could be a GitHub bug. Please include \`${requestId}\` when reporting this issue.`,
      },
    ],
  });
}
