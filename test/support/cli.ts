import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { vi } from 'vitest';
// @ts-expect-error bin/lib is plain JavaScript without types
import { MALLOC_ENV, V8_DEFAULTS } from '../../bin/lib/entry.mjs';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/**
 * bin/*'s memory defaults (bin/lib/entry.mjs), set in a child's environment beforehand so
 * that its launcher has nothing to apply and does not start Node a second time (execve):
 * the same heap limits and malloc arenas, one Node start (~0.1-0.2 CPU-s) less per child.
 * Nothing when the caller's environment sets any of them: then the launcher does its own
 * merge, as for an operator (test/e2e/launcher.test.ts checks that path, and the re-exec).
 */
export function memoryDefaultsEnv(env: Record<string, string | undefined>): Record<string, string> {
  const names = ['NODE_OPTIONS', ...Object.keys(MALLOC_ENV as Record<string, string>)];
  if (names.some((n) => env[n] !== undefined)) return {};
  const flags = (V8_DEFAULTS as [string, string][]).map(([f, v]) => `${f}=${v}`).join(' ');
  return { ...(MALLOC_ENV as Record<string, string>), NODE_OPTIONS: flags };
}

export interface Exit {
  code: number;
  out: string;
  err: string;
}

/**
 * Runs the real executable bin/<name> to completion, as an operator would (no TTY), with
 * this Node first on PATH (the shebang is `env node`). `env` entries set to undefined are
 * removed from the child's environment.
 */
export function runBin(
  name: string,
  argv: string[],
  env: Record<string, string | undefined>,
): Promise<Exit> {
  const given = { ...process.env, ...env };
  const childEnv: NodeJS.ProcessEnv = {
    ...process.env,
    PATH: `${path.dirname(process.execPath)}:${process.env.PATH}`,
    ...memoryDefaultsEnv(given),
    ...env,
  };
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete childEnv[k];
  return new Promise((resolve) => {
    execFile(
      path.join(ROOT, 'bin', name),
      argv,
      { cwd: ROOT, env: childEnv },
      (error, stdout, stderr) =>
        resolve({ code: error ? Number(error.code ?? 1) : 0, out: stdout, err: stderr }),
    );
  });
}

/** Runs a command's main(argv) in-process and returns its exit code and what it printed. */
export async function captureMain(
  main: (argv: string[]) => Promise<number>,
  argv: string[],
): Promise<Exit> {
  const out: string[] = [];
  const err: string[] = [];
  const o = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
    out.push(String(chunk));
    return true;
  });
  const e = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
    err.push(String(chunk));
    return true;
  });
  try {
    return { code: await main(argv), out: out.join(''), err: err.join('') };
  } finally {
    o.mockRestore();
    e.mockRestore();
  }
}
