import { expect } from 'vitest';
import { loadConfig } from '../../src/platform/config/config.ts';
import { ConfigError } from '../../src/platform/errors.ts';

/** The ConfigError loadConfig throws for `env` (fails the test when it throws none). */
export function configError(env: Record<string, string>): ConfigError {
  try {
    loadConfig(env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error(`expected a ConfigError for ${Object.keys(env).join(', ')}`);
}
