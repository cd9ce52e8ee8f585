import { MAX_JSON_DEPTH } from '../platform/json/bounded.ts';
import { inspectJson, storableCopy, storableText } from '../platform/json/walk.ts';
import type { PushRow } from '../store/mapping.ts';
import {
  countField,
  idField,
  KEY_CAPS,
  keyText,
  objectField,
  Rejection,
  timestampField,
} from '../store/rules.ts';
import { timelineBefore } from '../store/timeline-key.ts';

/**
 * GH Archive's "timeline" lines (ADR 0194): the format of its 2011–2014 hours, read from
 * GitHub's old timeline rather than the Events API. A push line there differs from a
 * modern one in every field we key on:
 *
 * - `actor` is the login; `actor_attributes` the profile (login, name, email, gravatar_id,
 *   no account id);
 * - `repository` (id, name, owner login, url, organization login, …) stands where `repo`
 *   stands, and the full name is `owner/name`;
 * - `payload` is `{shas, size, ref, head}`: each of `shas` is `[sha, email, message, name,
 *   distinct]`, the oldest 20 of the push's commits, like a modern event's `commits`;
 * - there is no event id, no `push_id` and no `before` (the compare `url` names it,
 *   abbreviated): the push is keyed as src/store/timeline-key.ts says;
 * - `created_at` is US-Pacific time with its offset (`-08:00`), normalised to UTC here.
 *
 * A line maps to the same PushRow any other push is, with its payload in the modern shape
 * (`commits` of `{sha, author: {email, name}, message, distinct}`), so storing, the email
 * policy and the export treat it as every other push. Key fields follow the rules of
 * src/store/rules.ts: one that breaks them sets the line aside.
 */

const OWNER_NAME = /^[^/\s]+\/[^/\s]+$/;
const GITHUB_REPO_URL = /^https?:\/\/github\.com\/([^/\s?#]+)\/([^/\s?#]+)\/?$/;
const ORG_LOGIN_CAP = 255;

const asObject = (v: unknown): Record<string, unknown> | null =>
  v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;

/**
 * Whether a parsed line is in the timeline format: no event id, no `repo`, and the
 * timeline's own fields (a login for `actor`, `actor_attributes`, `repository`). A modern
 * line that lost its id still has `repo` and is refused as one ("id is missing").
 */
export function isTimelineLine(e: Record<string, unknown>): boolean {
  if (e.id !== undefined || e.repo !== undefined) return false;
  return (
    typeof e.actor === 'string' || e.actor_attributes !== undefined || e.repository !== undefined
  );
}

/** `owner/name`: the repository's owner and name, else the path of its github.com url. */
function fullNameOf(repo: Record<string, unknown>): string {
  let name: string;
  if (typeof repo.owner === 'string' && typeof repo.name === 'string') {
    name = `${repo.owner}/${repo.name}`;
  } else {
    const m = typeof repo.url === 'string' ? GITHUB_REPO_URL.exec(repo.url) : null;
    if (!m) throw new Rejection('malformed', 'repository.owner and repository.name are missing');
    name = `${m[1]}/${m[2]}`;
  }
  const full = keyText(name, 'repository.owner/name', KEY_CAPS.repositoryName);
  if (!OWNER_NAME.test(full)) throw new Rejection('malformed', 'repository must be OWNER/NAME');
  return full;
}

/** The organization's login a repository names (`organization`), when it is usable text. */
function orgLoginOf(repo: Record<string, unknown>): string | null {
  const login = repo.organization;
  if (typeof login !== 'string' || login === '' || login.length > ORG_LOGIN_CAP) return null;
  return storableText(login) === login ? login : null;
}

/** One `shas` entry as a modern commit; anything else stays a slot with no sha (not stored). */
function commitOf(entry: unknown): Record<string, unknown> | null {
  if (!Array.isArray(entry)) return null;
  const [sha, email, message, name, distinct] = entry as unknown[];
  return { sha, author: { email, name }, message, distinct };
}

/**
 * A timeline PushEvent → its push; throws Rejection. `ev` is parsed exactly where an
 * integer could have lost digits (the caller's concern, as for modern lines).
 */
export function timelinePush(ev: Record<string, unknown>): PushRow {
  const attrs = asObject(ev.actor_attributes);
  const login = keyText(ev.actor ?? attrs?.login, 'actor', KEY_CAPS.login);
  // The profile carries no account id in the hours seen; one that does is kept.
  const actorId = attrs?.id === undefined ? null : idField(attrs.id, 'actor_attributes.id');
  const repo = objectField(ev.repository, 'repository');
  const repoId = idField(repo.id, 'repository.id');
  const fullName = fullNameOf(repo);
  const createdAt = timestampField(ev.created_at, 'created_at');
  const p = objectField(ev.payload, 'payload');
  const ref = keyText(p.ref, 'payload.ref', KEY_CAPS.ref);
  const head = keyText(p.head, 'payload.head', KEY_CAPS.sha);
  const size = p.size === undefined ? null : countField(p.size, 'payload.size');
  const { shas, ...rest } = p;
  if (shas !== undefined && !Array.isArray(shas)) {
    throw new Rejection('malformed', 'payload.shas must be an array');
  }
  const built: Record<string, unknown> = { ...rest };
  if (shas !== undefined) built.commits = shas.map(commitOf);
  // As a modern payload is judged: bounded depth, free text Postgres cannot hold replaced.
  const found = inspectJson(built, MAX_JSON_DEPTH - 1, 'payload');
  if (found.tooDeep) {
    throw new Rejection(
      'too_deep',
      `${found.tooDeep} is nested deeper than ${MAX_JSON_DEPTH} levels`,
    );
  }
  const payload = found.badText ? (storableCopy(built) as Record<string, unknown>) : built;
  const orgLogin = orgLoginOf(repo);
  return {
    id: null,
    actor: { id: actorId, login },
    repository: { id: repoId, fullName },
    pushId: null,
    ref,
    head,
    before: timelineBefore(ev.url),
    createdAt,
    payload,
    size,
    distinctSize: null,
    org: orgLogin === null ? null : { id: null, login: orgLogin },
    timeline: true,
    ...(ev.public === false || repo.private === true ? { private: true as const } : {}),
  };
}

/** The names a scope tests a timeline line by: its actor's login and its repository's. */
export function timelineNames(e: Record<string, unknown>): {
  actorLogin: string | null;
  repoName: string | null;
  repoId: unknown;
  orgLogin: string | null;
} {
  const repo = asObject(e.repository);
  let repoName: string | null = null;
  if (repo) {
    try {
      repoName = fullNameOf(repo);
    } catch {
      repoName = null;
    }
  }
  return {
    actorLogin: typeof e.actor === 'string' ? e.actor : null,
    repoName,
    repoId: repo?.id,
    orgLogin: repo && typeof repo.organization === 'string' ? repo.organization : null,
  };
}
