import { asObject, int, profileJson, requiredId, requiredString, str, time } from './profile.ts';
import type { ProfileColumns } from './state.ts';

/**
 * GET /users/{login} → actors columns. The login comes back too: it is stored, so a
 * renamed account's row follows GitHub (the id is the key, the login only a label).
 */
export function actorProfile(data: unknown, path: string): { id: string; columns: ProfileColumns } {
  const o = asObject(data, path);
  const id = requiredId(o, path);
  return {
    id,
    columns: {
      login: requiredString(o, 'login', path),
      name: str(o.name),
      company: str(o.company),
      blog: str(o.blog),
      location: str(o.location),
      bio: str(o.bio),
      type: str(o.type),
      public_repos: int(o.public_repos),
      followers: int(o.followers),
      following: int(o.following),
      github_created_at: time(o.created_at),
      profile: profileJson(o),
    },
  };
}
