import { execFile } from 'node:child_process';
import path from 'node:path';
import { ROOT } from './cli.ts';

/**
 * Runs a command in a pseudo-terminal, as a person at a terminal runs it: util-linux's
 * `script` gives it a TTY on stdin, stdout and stderr (both streams land on the one
 * screen, as they do for a person). `screen` is what the terminal shows at the end: the
 * raw bytes replayed through carriage returns, "erase line" and newlines, colours removed.
 */
export interface PtyRun {
  code: number;
  raw: string;
  screen: string[];
}

const ESC = '\u001b';

/** Escape characters made visible (`<ESC>`), so a test can match sequences in plain regexps. */
export function visibleEscapes(raw: string): string {
  return raw.replaceAll(ESC, '<ESC>');
}

export function renderScreen(raw: string): string[] {
  const lines: string[] = [];
  let line: string[] = [];
  let col = 0;
  const text = raw.replace(new RegExp(`${ESC}\\[[0-9;]*m`, 'g'), ''); // SGR colours
  for (let i = 0; i < text.length; i++) {
    if (text.startsWith(`${ESC}[2K`, i)) {
      line = [];
      i += 3;
      continue;
    }
    const ch = text[i]!;
    if (ch === '\r') col = 0;
    else if (ch === '\n') {
      lines.push(line.join('').trimEnd());
      line = [];
      col = 0;
    } else {
      line[col] = ch;
      col += 1;
    }
  }
  if (line.length > 0) lines.push(line.join('').trimEnd());
  return lines;
}

export function runInPty(
  command: string,
  env: Record<string, string | undefined>,
): Promise<PtyRun> {
  const childEnv: NodeJS.ProcessEnv = {
    ...process.env,
    PATH: `${path.dirname(process.execPath)}:${process.env.PATH}`,
    TERM: 'xterm',
    ...env,
  };
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete childEnv[k];
  return new Promise((resolve) => {
    execFile(
      'script',
      ['-qfec', command, '/dev/null'],
      { cwd: ROOT, env: childEnv, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout) =>
        resolve({
          code: error ? Number(error.code ?? 1) : 0,
          raw: stdout,
          screen: renderScreen(stdout),
        }),
    );
  });
}
