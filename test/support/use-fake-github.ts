import { afterAll, beforeAll, beforeEach } from 'vitest';
import { type FakeGitHub, type FakeGitHubOptions, startFakeGitHub } from './fake-github.ts';

/**
 * One fake GitHub for the whole test file: started before the first test, reset before
 * each (requests, faults, data), closed after the last. Returns a stand-in usable at
 * module level that forwards to the running fake.
 */
export function useFakeGitHub(opts?: FakeGitHubOptions): FakeGitHub {
  let fake: FakeGitHub | undefined;
  beforeAll(async () => {
    fake = await startFakeGitHub(opts);
  });
  afterAll(async () => {
    await fake?.close();
  });
  beforeEach(() => fake?.reset());
  const running = (): FakeGitHub => {
    if (!fake) throw new Error('the fake GitHub is used before beforeAll started it');
    return fake;
  };
  return new Proxy({} as FakeGitHub, {
    get(_target, prop) {
      const value = Reflect.get(running(), prop);
      return typeof value === 'function' ? value.bind(running()) : value;
    },
    set(_target, prop, value) {
      return Reflect.set(running(), prop, value);
    },
  });
}
