import type { PushRow } from '../../src/store/mapping.ts';

let seq = 0;

/** A push as mapping.ts produces it (ids as decimal strings); every field overridable. */
export function pushRow(overrides: Partial<PushRow> = {}): PushRow {
  seq++;
  const head = seq.toString(16).padStart(40, 'a');
  return {
    id: String(40_000_000_000 + seq),
    actor: { id: String(1000 + seq), login: `user${seq}` },
    repository: { id: String(2000 + seq), fullName: `owner${seq}/repo${seq}` },
    pushId: String(9_000_000 + seq),
    ref: 'refs/heads/main',
    head,
    before: '0'.repeat(40),
    createdAt: new Date(Date.UTC(2026, 10, 29, 8, 0, seq % 60)),
    payload: { ref: 'refs/heads/main', head, before: '0'.repeat(40) },
    size: null,
    distinctSize: null,
    ...overrides,
  };
}
