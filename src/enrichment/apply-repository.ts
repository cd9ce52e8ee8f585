import {
  asObject,
  bool,
  int,
  profileJson,
  requiredId,
  requiredString,
  str,
  time,
} from './profile.ts';
import type { ProfileColumns } from './state.ts';

/**
 * GET /repos/{owner}/{name} → repositories columns. A renamed or transferred repository
 * answers 301 and the client follows it; the body then carries the new full_name, which
 * is stored under the same id.
 */
export function repositoryProfile(
  data: unknown,
  path: string,
): { id: string; columns: ProfileColumns } {
  const o = asObject(data, path);
  const id = requiredId(o, path);
  const license =
    o.license && typeof o.license === 'object' ? (o.license as Record<string, unknown>) : null;
  const topics = Array.isArray(o.topics)
    ? o.topics.filter((t): t is string => typeof t === 'string')
    : null;
  return {
    id,
    columns: {
      full_name: requiredString(o, 'full_name', path),
      description: str(o.description),
      language: str(o.language),
      stargazers: int(o.stargazers_count),
      forks: int(o.forks_count),
      default_branch: str(o.default_branch),
      fork: bool(o.fork),
      archived: bool(o.archived),
      // SPDX id when GitHub knows it ("MIT"), else its key ("other").
      license: license ? (str(license.spdx_id) ?? str(license.key)) : null,
      topics,
      pushed_at: time(o.pushed_at),
      github_created_at: time(o.created_at),
      profile: profileJson(o),
    },
  };
}
