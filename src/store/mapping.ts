import { AppError } from '../platform/errors.ts';
import { MAX_JSON_DEPTH } from '../platform/json/bounded.ts';
import { isRawJson, TooDeepJson } from '../platform/json/exact.ts';
import { inspectJson, type JsonInspection, storableCopy } from '../platform/json/walk.ts';
import {
  countField,
  idField,
  KEY_CAPS,
  keyText,
  objectField,
  parseTimestamp,
  Rejection,
  type RejectionReason,
  timestampField,
} from './rules.ts';

/**
 * GitHub events → what we store. Each event is judged on its own (src/store/rules.ts):
 * a PushEvent that breaks a rule is rejected (rejected_events) and the rest of the page
 * is stored — one bad event never costs the good ones around it. Only a page that is not
 * a JSON array at all is an error of the page (MalformedEvent: the run fails).
 */

/** A page that is not shaped the way GitHub documents it (not an array of events). */
export class MalformedEvent extends AppError {
  constructor(path: string, detail: string, context: Record<string, unknown> = {}) {
    super('MALFORMED_EVENT', `malformed event feed ${path}: ${detail}`, { path, ...context });
  }
}

/** A push, however it arrived (poll: with the event id; webhook: id null). Ids are decimal strings. */
export interface PushRow {
  /** GitHub event id as a decimal string (bigint); null for webhook deliveries. */
  id: string | null;
  /** `id` null: a timeline-format archive line, which names its actor by login only. */
  actor: { id: string | null; login: string };
  repository: { id: string; fullName: string };
  /**
   * The organisation the event names (an event's `org`, a delivery's `organization`), as
   * of the event; null or absent: none. Stored with the push, as the login and the name
   * are, so that an hour file writes what the event said. `id` null: a timeline-format
   * line, which names the organisation by its login only.
   */
  org?: { id: string | null; login: string } | null;
  pushId: string | null;
  ref: string;
  head: string;
  before: string;
  createdAt: Date;
  /** The event's payload as GitHub sent it (size/commits kept when present), storable. */
  payload: Record<string, unknown>;
  size: number | null;
  distinctSize: number | null;
  /**
   * True when the push is known to be a private repository's (an event's `public: false`, a
   * delivery's `repository.private`); absent otherwise. Only who gets commits reads it: the
   * public source covers public pushes. Not stored.
   */
  private?: true;
  /**
   * Read from a timeline-format archive line (src/backfill/timeline.ts): no event id, and a
   * `before` that is its key's abbreviation, not a full sha (src/store/timeline-key.ts). Its
   * commits are the ones the line carries; it is never sent to commit fetching.
   */
  timeline?: true;
}

/** A rejected event: what rejected_events records. */
export interface RejectedEvent {
  /** Position on the page (0 = newest). */
  index: number;
  /** The id as given (its text), or null when the event has none. */
  eventId: string | null;
  eventType: string | null;
  reason: RejectionReason;
  message: string;
  /** The event as parsed (or its text, when it was too deep to parse). */
  raw: unknown;
}

export interface MappedPage {
  /** Events on the page, rejected ones included. */
  size: number;
  /** Every valid event id on the page, in feed order (newest first), push or not. */
  eventIds: string[];
  /** When each of eventIds was created: its valid created_at, else null (same order). */
  eventTimes: (Date | null)[];
  pushes: PushRow[];
  /** Non-push events by type: counted, never stored. */
  otherTypes: Record<string, number>;
  rejected: RejectedEvent[];
  /** Pushes stored with free text made storable (U+0000 or a lone surrogate → U+FFFD). */
  sanitised: { eventId: string; path: string }[];
}

const OWNER_NAME = /^[^/\s]+\/[^/\s]+$/;

/**
 * The id as given, for the record: a string, or a scalar's text, cut short. An object or
 * array is not an id at all (and is never serialized here: it may be nested arbitrarily deep).
 */
function givenId(raw: unknown): string | null {
  if (raw instanceof TooDeepJson) return null;
  const id =
    raw !== null && typeof raw === 'object' ? (raw as Record<string, unknown>).id : undefined;
  let text: string;
  if (typeof id === 'string') text = id;
  else if (typeof id === 'number' || typeof id === 'boolean') text = String(id);
  else if (isRawJson(id)) text = id.rawJSON;
  else return null;
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

function givenType(raw: unknown): string | null {
  const type =
    raw !== null && typeof raw === 'object' && !(raw instanceof TooDeepJson)
      ? (raw as Record<string, unknown>).type
      : undefined;
  return typeof type === 'string' ? type.slice(0, KEY_CAPS.eventType) : null;
}

/**
 * An event's `org` (or a delivery's `organization`): its id and login when both are
 * there and valid, else null. Never a reason to set a push aside: the organisation is a
 * label of the event, not part of the push, and GitHub's early answers carried a
 * placeholder `org` with a URL only.
 */
export function orgOf(raw: unknown): { id: string; login: string } | null {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) return null;
  const o = raw as Record<string, unknown>;
  try {
    return { id: idField(o.id, 'org.id'), login: keyText(o.login, 'org.login', KEY_CAPS.login) };
  } catch (err) {
    if (err instanceof Rejection) return null;
    throw err;
  }
}

/**
 * Maps one PushEvent whose id is known valid (null: an archive line of a push known only
 * by webhook, src/backfill/events.ts); throws Rejection. `walked`: the event's own
 * inspection when the caller already made one (the poll path judges every event whole):
 * nothing too deep in it means nothing too deep in its payload, and no bad text in it means
 * none in its payload, so the payload is walked again only when the event held bad text.
 */
export function mapPushEvent(
  ev: Record<string, unknown>,
  id: string | null,
  walked?: JsonInspection,
): { push: PushRow; sanitisedAt: string | null } {
  const actor = objectField(ev.actor, 'actor');
  const repo = objectField(ev.repo, 'repo');
  const actorId = idField(actor.id, 'actor.id');
  const login = keyText(actor.login, 'actor.login', KEY_CAPS.login);
  const repoId = idField(repo.id, 'repo.id');
  const name = keyText(repo.name, 'repo.name', KEY_CAPS.repositoryName);
  if (!OWNER_NAME.test(name)) throw new Rejection('malformed', 'repo.name must be OWNER/NAME');
  const createdAt = timestampField(ev.created_at, 'created_at');
  const p = objectField(ev.payload, 'payload');
  const ref = keyText(p.ref, 'payload.ref', KEY_CAPS.ref);
  const head = keyText(p.head, 'payload.head', KEY_CAPS.sha);
  const before = keyText(p.before, 'payload.before', KEY_CAPS.sha);
  const pushId = p.push_id === undefined ? null : idField(p.push_id, 'payload.push_id');
  const size = p.size === undefined ? null : countField(p.size, 'payload.size');
  const distinctSize =
    p.distinct_size === undefined ? null : countField(p.distinct_size, 'payload.distinct_size');

  // The payload is stored whole: bounded depth; free text Postgres cannot hold is replaced.
  const found =
    walked && walked.tooDeep === null && walked.badText === null
      ? walked
      : inspectJson(p, MAX_JSON_DEPTH - 1, 'payload');
  if (found.tooDeep) {
    throw new Rejection(
      'too_deep',
      `${found.tooDeep} is nested deeper than ${MAX_JSON_DEPTH} levels`,
    );
  }
  const payload = found.badText ? (storableCopy(p) as Record<string, unknown>) : p;
  return {
    push: {
      id,
      actor: { id: actorId, login },
      repository: { id: repoId, fullName: name },
      org: orgOf(ev.org),
      pushId,
      ref,
      head,
      before,
      createdAt,
      payload,
      size,
      distinctSize,
      // A private repository's event (a token that can see it): not the public source's.
      ...(ev.public === false ? { private: true as const } : {}),
    },
    sanitisedAt: found.badText?.path ?? null,
  };
}

/**
 * Judges and maps one page of an events feed. Throws MalformedEvent only when the page is
 * not a JSON array; every event in it is either mapped or listed in `rejected`.
 */
export function mapEventsPage(data: unknown, path: string): MappedPage {
  if (!Array.isArray(data)) {
    throw new MalformedEvent(
      path,
      `expected a JSON array of events, got ${data === null ? 'null' : typeof data}`,
    );
  }
  const page: MappedPage = {
    size: data.length,
    eventIds: [],
    eventTimes: [],
    pushes: [],
    otherTypes: {},
    rejected: [],
    sanitised: [],
  };
  const others = new Map<string, number>();
  data.forEach((raw: unknown, index) => {
    try {
      if (raw instanceof TooDeepJson) {
        // Over the JSON limits: never parsed (src/platform/json/bounded.ts).
        throw new Rejection(
          raw.reason,
          raw.detail || `event is nested deeper than ${MAX_JSON_DEPTH} levels`,
        );
      }
      if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
        throw new Rejection('not_an_object', 'event must be a JSON object');
      }
      const ev = raw as Record<string, unknown>;
      // Judged whole, whichever parser path read it (the reviver path marks deep events).
      const walked = inspectJson(ev, MAX_JSON_DEPTH);
      if (walked.tooDeep) {
        throw new Rejection(
          'too_deep',
          `${walked.tooDeep} is nested deeper than ${MAX_JSON_DEPTH} levels`,
        );
      }
      const id = idField(ev.id, 'id');
      // Known by id from here on: the horizon counts it whether it is stored or rejected.
      page.eventIds.push(id);
      // Its era scopes the id: GitHub reuses ids across eras.
      page.eventTimes.push(
        typeof ev.created_at === 'string' ? parseTimestamp(ev.created_at) : null,
      );
      const type = keyText(ev.type, 'type', KEY_CAPS.eventType);
      if (type !== 'PushEvent') {
        others.set(type, (others.get(type) ?? 0) + 1);
        return;
      }
      const { push, sanitisedAt } = mapPushEvent(ev, id, walked);
      page.pushes.push(push);
      if (sanitisedAt) page.sanitised.push({ eventId: id, path: sanitisedAt });
    } catch (err) {
      if (!(err instanceof Rejection)) throw err;
      page.rejected.push({
        index,
        eventId: givenId(raw),
        eventType: givenType(raw),
        reason: err.reason,
        message: err.message,
        raw,
      });
    }
  });
  page.otherTypes = Object.fromEntries(others);
  return page;
}
