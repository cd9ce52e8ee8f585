import { SOURCE_KINDS, type SourceKind } from '../db/columns.ts';
import { AppError, ConfigError } from '../errors.ts';
import { quoted } from '../quote.ts';

/**
 * What a source is, as an operator or SOURCES writes it: the kinds, GitHub's name rules,
 * and the SOURCES list. Pure — no database, no config — so src/platform/config/config.ts can parse SOURCES
 * with it without importing the sources module that reads the config.
 */

export type SourceSpec =
  | { kind: 'public' }
  | { kind: Exclude<SourceKind, 'public'>; target: string };

/** A source description that is not what GitHub would accept. */
export class InvalidSource extends AppError {
  constructor(message: string) {
    super('INVALID_SOURCE', message);
  }
}

// GitHub's rules: a login (user or org) is 1–39 characters, letters, digits and hyphens,
// not starting or ending with a hyphen. (New accounts cannot have "--", but some old ones
// do, so it is allowed.) A repository name is 1–100 of letters, digits, '.', '_', '-',
// and never "." or "..".
const LOGIN = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?$/;
const REPO_NAME = /^[A-Za-z0-9._-]{1,100}$/;

function checkLogin(what: string, value: string): string {
  if (!LOGIN.test(value)) {
    throw new InvalidSource(
      `${what} ${quoted(value)} is not a GitHub login (1-39 letters, digits or hyphens; no leading or trailing hyphen)`,
    );
  }
  return value;
}

/** Validates a kind and its target; returns the canonical spec. */
export function sourceSpec(kind: string, target?: string | null): SourceSpec {
  const t = target?.trim() || undefined;
  switch (kind) {
    case 'public':
      if (t !== undefined) throw new InvalidSource('a public source takes no target');
      return { kind: 'public' };
    case 'org':
    case 'user':
      if (t === undefined) throw new InvalidSource(`a ${kind} source needs a login`);
      return { kind, target: checkLogin(kind, t) };
    case 'repo': {
      if (t === undefined) throw new InvalidSource('a repo source needs OWNER/NAME');
      const parts = t.split('/');
      if (parts.length !== 2) throw new InvalidSource(`repo ${quoted(t)} is not OWNER/NAME`);
      const [owner, name] = parts as [string, string];
      checkLogin('repo owner', owner);
      if (!REPO_NAME.test(name) || name === '.' || name === '..') {
        throw new InvalidSource(
          `repo name ${quoted(name)} is not a GitHub repository name (1-100 letters, digits, '.', '_' or '-')`,
        );
      }
      return { kind: 'repo', target: `${owner}/${name}` };
    }
    default:
      throw new InvalidSource(
        `unknown source kind ${quoted(kind)} (expected ${SOURCE_KINDS.join(', ')})`,
      );
  }
}

/**
 * Parses SOURCES: comma-separated `public`, `repo:OWNER/NAME`, `org:ORG`, `user:LOGIN`.
 * Blank entries (a trailing comma) are ignored; anything else bad is a ConfigError.
 */
export function parseSourcesList(raw: string): SourceSpec[] {
  const specs: SourceSpec[] = [];
  for (const entry of raw.split(',').map((e) => e.trim())) {
    if (entry === '') continue;
    const colon = entry.indexOf(':');
    const kind = colon === -1 ? entry : entry.slice(0, colon);
    const target = colon === -1 ? undefined : entry.slice(colon + 1);
    try {
      specs.push(sourceSpec(kind.trim().toLowerCase(), target));
    } catch (err) {
      if (err instanceof InvalidSource) {
        throw new ConfigError('SOURCES', `has a bad entry ${quoted(entry)}: ${err.message}`);
      }
      throw err;
    }
  }
  return specs;
}

/**
 * Whether a new source asks for its pushes' commits: every kind does, `public` included
 * (it once started with commits off). A push's commits are what most users of the timeline came
 * for, GraphQL batches fetch ~20 pushes a point, and COMMITS_SHARE bounds what they
 * spend. A process without a credential fetches none whatever this says (commitsOffReason).
 */
export function commitsEnabledFor(_kind: SourceKind): boolean {
  return true;
}
