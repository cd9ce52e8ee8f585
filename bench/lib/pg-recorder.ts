import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { setUpSession } from '../../src/platform/db/pool.ts';

/**
 * A pg Client class that reports every statement it sends, and how long the answer took.
 * Used to EXPLAIN exactly what a function sends (bench/lib/explain.ts) and to split the
 * ingest benchmark's time by statement (a profile by SQL, cheaper than a CPU profile).
 */

export interface SentStatement {
  text: string;
  values: unknown[];
  /** Milliseconds from the call to the answer (includes waiting behind this client's queue). */
  ms: number;
}

/** pg.Client seen as what we need of it: one variadic query(). */
const BaseClient = pg.Client as unknown as new (
  config?: unknown,
) => { query(...args: unknown[]): unknown };

export function recordingClient(onStatement: (s: SentStatement) => void): typeof pg.Client {
  class RecordingClient extends BaseClient {
    override query(...args: unknown[]): unknown {
      const [config, values] = args;
      let text: string | undefined;
      let params: unknown[] = Array.isArray(values) ? values : [];
      if (typeof config === 'string') text = config;
      else if (config && typeof (config as { text?: unknown }).text === 'string') {
        text = (config as { text: string }).text;
        params = (config as { values?: unknown[] }).values ?? params;
      }
      const t0 = performance.now();
      const result = super.query(...args) as { then?: unknown } | undefined;
      if (text !== undefined) {
        const done = () => onStatement({ text, values: params, ms: performance.now() - t0 });
        if (result && typeof result.then === 'function') {
          (result as Promise<unknown>).then(done, done);
        } else done();
      }
      return result;
    }
  }
  return RecordingClient as unknown as typeof pg.Client;
}

/** A pool whose every client is a RecordingClient. */
export function recordingPool(
  url: string,
  max: number,
  onStatement: (s: SentStatement) => void,
  applicationName = 'gpi-bench-recorder',
): pg.Pool {
  return new pg.Pool({
    connectionString: url,
    max,
    application_name: applicationName,
    Client: recordingClient(onStatement),
    // Sessions set up as the application's are (no JIT), or the figures are of another setup.
    onConnect: setUpSession,
  });
}
