import type { EntityClass } from '../budget/types.ts';

export const ENTITY_CLASSES: readonly EntityClass[] = ['actor', 'repository'];

/** Where each class lives and how GitHub names it. */
export interface EntityTable {
  table: 'actors' | 'repositories';
  /** The column holding the name GitHub addresses it by (it can change; the id cannot). */
  nameColumn: 'login' | 'full_name';
  /** The profile's path relative to GITHUB_API_URL. */
  path(name: string): string;
}

export const ENTITY_TABLES: Readonly<Record<EntityClass, EntityTable>> = {
  actor: {
    table: 'actors',
    nameColumn: 'login',
    // encodeURIComponent: `dependabot[bot]` must go out as `dependabot%5Bbot%5D`, and a
    // stray '/', '?' or '#' in a stored login must never change which resource we ask for.
    path: (login) => `/users/${encodeURIComponent(login)}`,
  },
  repository: {
    table: 'repositories',
    nameColumn: 'full_name',
    path: (fullName) => `/repos/${fullName.split('/').map(encodeURIComponent).join('/')}`,
  },
};

export function otherClass(cls: EntityClass): EntityClass {
  return cls === 'actor' ? 'repository' : 'actor';
}

export function isEntityClass(value: unknown): value is EntityClass {
  return value === 'actor' || value === 'repository';
}
