import { createHash } from 'node:crypto';

/**
 * Factories for GitHub API shapes as GitHub documents them (REST API, github.com).
 * Ids are sequential by default so tests read naturally; every field is overridable.
 * Event ids are decimal STRINGS (as the events API sends them); actor/repo ids numbers.
 */

export type Json = Record<string, unknown>;

export interface EventActor {
  id: number;
  login: string;
  display_login?: string;
  gravatar_id?: string;
  url?: string;
  avatar_url?: string;
}

export interface EventRepo {
  id: number;
  name: string;
  url?: string;
}

export interface GitHubEvent {
  id: string;
  type: string;
  actor: EventActor;
  repo: EventRepo;
  payload: Json;
  public: boolean;
  created_at: string;
  org?: { id: number; login: string; gravatar_id?: string; url?: string; avatar_url?: string };
}

export interface EventOverrides {
  id?: string | number;
  actor?: Partial<EventActor>;
  repo?: Partial<EventRepo>;
  payload?: Json;
  public?: boolean;
  created_at?: string | Date;
  org?: GitHubEvent['org'] | null;
}

const API = 'https://api.github.com';

const FIRST_EVENT_ID = 40_000_000_001;
let nextEventId = FIRST_EVENT_ID;
let nextPushId = 20_000_000_001;
let nextUserId = 1001;
let nextRepoId = 500_001;
let nextSha = 1;
const baseTime = Date.parse('2026-11-29T08:00:00Z');

/** Restart every sequence (call in beforeEach when a test needs exact ids). */
export function resetFactorySequences(): void {
  nextEventId = FIRST_EVENT_ID;
  nextPushId = 20_000_000_001;
  nextUserId = 1001;
  nextRepoId = 500_001;
  nextSha = 1;
}

/** A deterministic 40-hex commit sha. */
export function sha(seed: string | number = nextSha++): string {
  return createHash('sha1').update(String(seed)).digest('hex');
}

function eventActor(o: Partial<EventActor> = {}): EventActor {
  const id = o.id ?? nextUserId++;
  const login = o.login ?? `user-${id}`;
  return {
    id,
    login,
    display_login: o.display_login ?? login.replace(/\[bot\]$/, ''),
    gravatar_id: '',
    url: `${API}/users/${encodeURIComponent(login)}`,
    avatar_url: `https://avatars.githubusercontent.com/u/${id}?`,
    ...o,
  };
}

function eventRepo(o: Partial<EventRepo> = {}): EventRepo {
  const id = o.id ?? nextRepoId++;
  const name = o.name ?? `owner-${id}/repo-${id}`;
  return { id, name, url: `${API}/repos/${name}`, ...o };
}

function baseEvent(type: string, o: EventOverrides, payload: Json): GitHubEvent {
  const id = String(o.id ?? nextEventId++);
  const createdAt =
    o.created_at instanceof Date
      ? o.created_at.toISOString().replace(/\.\d{3}Z$/, 'Z')
      : (o.created_at ??
        new Date(baseTime + (Number(id) % 1_000_000) * 1000)
          .toISOString()
          .replace(/\.\d{3}Z$/, 'Z'));
  const ev: GitHubEvent = {
    id,
    type,
    actor: eventActor(o.actor),
    repo: eventRepo(o.repo),
    payload,
    public: o.public ?? true,
    created_at: createdAt,
  };
  if (o.org) ev.org = o.org;
  return ev;
}

/**
 * A PushEvent as the github.com events API serves it: the payload holds
 * `repository_id, push_id, ref, head, before` only (no size/commits; pass them in
 * `payload` to imitate GHES or a webhook).
 */
export function pushEvent(o: EventOverrides = {}): GitHubEvent {
  const ev = baseEvent('PushEvent', o, {});
  ev.payload = {
    repository_id: ev.repo.id,
    push_id: nextPushId++,
    ref: 'refs/heads/main',
    head: sha(),
    before: sha(),
    ...o.payload,
  };
  return ev;
}

/** Any other event type (WatchEvent, IssuesEvent, CreateEvent …): counted, never stored. */
export function otherEvent(type: string, o: EventOverrides = {}): GitHubEvent {
  const defaults: Record<string, Json> = {
    WatchEvent: { action: 'started' },
    CreateEvent: { ref: 'main', ref_type: 'branch', master_branch: 'main', description: null },
    IssuesEvent: { action: 'opened', issue: { number: 1, title: 'A bug' } },
    ForkEvent: { forkee: { id: nextRepoId++ } },
  };
  return baseEvent(type, o, { ...(defaults[type] ?? {}), ...o.payload });
}

/** GET /users/{login}; a login ending in `[bot]` becomes a type 'Bot' account. */
export function userProfile(
  o: Json & { id?: number; login?: string } = {},
): Json & { id: number; login: string } {
  const id = o.id ?? nextUserId++;
  const login = o.login ?? `user-${id}`;
  const isBot = login.endsWith('[bot]');
  return {
    login,
    id,
    node_id: Buffer.from(`04:User${id}`).toString('base64'),
    avatar_url: `https://avatars.githubusercontent.com/u/${id}?v=4`,
    gravatar_id: '',
    url: `${API}/users/${encodeURIComponent(login)}`,
    html_url: isBot
      ? `https://github.com/apps/${login.replace(/\[bot\]$/, '')}`
      : `https://github.com/${login}`,
    type: isBot ? 'Bot' : 'User',
    user_view_type: 'public',
    site_admin: false,
    name: isBot ? null : `User ${id}`,
    company: null,
    blog: '',
    location: null,
    email: null,
    hireable: null,
    bio: null,
    twitter_username: null,
    public_repos: 3,
    public_gists: 0,
    followers: 10,
    following: 2,
    created_at: '2015-03-01T12:00:00Z',
    updated_at: '2026-10-01T12:00:00Z',
    ...o,
  };
}

/** GET /repos/{owner}/{name}. */
export function repoProfile(
  o: Json & { id?: number; full_name?: string } = {},
): Json & { id: number; full_name: string } {
  const id = o.id ?? nextRepoId++;
  const fullName = o.full_name ?? `owner-${id}/repo-${id}`;
  const [ownerLogin, name] = fullName.split('/') as [string, string];
  return {
    id,
    node_id: Buffer.from(`010:Repository${id}`).toString('base64'),
    name,
    full_name: fullName,
    private: false,
    owner: {
      login: ownerLogin,
      id: 9_000_000 + (id % 1_000_000),
      type: 'User',
      url: `${API}/users/${ownerLogin}`,
      html_url: `https://github.com/${ownerLogin}`,
      site_admin: false,
    },
    html_url: `https://github.com/${fullName}`,
    description: `Repository ${fullName}`,
    fork: false,
    url: `${API}/repos/${fullName}`,
    created_at: '2018-01-01T00:00:00Z',
    updated_at: '2026-11-01T00:00:00Z',
    pushed_at: '2026-11-28T00:00:00Z',
    homepage: null,
    size: 120,
    stargazers_count: 42,
    watchers_count: 42,
    language: 'TypeScript',
    has_issues: true,
    forks_count: 7,
    archived: false,
    disabled: false,
    open_issues_count: 1,
    license: {
      key: 'mit',
      name: 'MIT License',
      spdx_id: 'MIT',
      url: `${API}/licenses/mit`,
      node_id: 'MDc6TGljZW5zZTEz',
    },
    allow_forking: true,
    is_template: false,
    topics: ['example'],
    visibility: 'public',
    forks: 7,
    open_issues: 1,
    watchers: 42,
    default_branch: 'main',
    network_count: 7,
    subscribers_count: 3,
    ...o,
  };
}
