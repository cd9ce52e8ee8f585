import { Writable } from 'node:stream';
import { type Config, loadConfig } from '../../src/platform/config/config.ts';
import { createLogger, type Logger } from '../../src/platform/log.ts';

/** Shared by the queue and recovery tests (not a test file itself). */

export interface LogLine {
  level: string;
  event?: string;
  msg?: string;
  [key: string]: unknown;
}

/** A real pino logger whose JSON lines are kept for assertions. */
export function captureLogger(level = 'debug'): {
  logger: Logger;
  lines: LogLine[];
  events(name: string): LogLine[];
} {
  const lines: LogLine[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split('\n')) if (line.trim()) lines.push(JSON.parse(line));
      done();
    },
  });
  const logger = createLogger(level, stream);
  return { logger, lines, events: (name) => lines.filter((l) => l.event === name) };
}

/** A Config for tests: fixture mode unless overridden, short gate wait. */
export function testConfig(env: Record<string, string> = {}): Config {
  return loadConfig({ GITHUB_MODE: 'fixture', GATE_WAIT_SECONDS: '2', ...env });
}

export { waitFor } from '../support/wait.ts';
