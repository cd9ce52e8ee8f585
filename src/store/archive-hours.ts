/**
 * GH Archive hours. Each hour of the public timeline is one file, `YYYY-MM-DD-H.json.gz`
 * (UTC, the hour NOT zero-padded: `2025-01-01-0` … `2025-01-01-23`), published a few
 * minutes after the hour ends. Since May 2025 events are filed by the time GH Archive
 * crawled them, not by `created_at`, so an event can sit in a later hour's file than its
 * timestamp says — which is why a gap is read with margins (gapHours).
 */

const HOUR_MS = 3_600_000;

/** How long after its end an hour file is assumed published (GH Archive needs a few minutes). */
export const PUBLISH_DELAY_MS = 15 * 60_000;
/** Margins around a gap's window: crawl-time filing puts late events in later files. */
export const GAP_MARGIN_BEFORE_MS = HOUR_MS;
export const GAP_MARGIN_AFTER_MS = 2 * HOUR_MS;
/**
 * The retry window: an hour still missing this long after it ended is missing for good (GH
 * Archive has such hours), and a mirror that lacked it is not asked again.
 */
export const RETRY_WINDOW_MS = 48 * HOUR_MS;

export interface ArchiveHour {
  /** GH Archive's name: `2025-01-01-15`. */
  name: string;
  /** The hour's first instant (UTC). */
  start: Date;
}

const HOUR_NAME = /^(\d{4})-(\d{2})-(\d{2})-(\d{1,2})$/;

/** `2025-01-01-15` (or `2025-01-01-05`) → the hour; null when it is not a real UTC hour. */
export function parseHour(raw: string): ArchiveHour | null {
  const m = HOUR_NAME.exec(raw);
  if (!m) return null;
  const [y, mo, d, h] = [Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4])];
  if (h > 23) return null;
  const start = new Date(Date.UTC(y, mo - 1, d, h));
  // Date.UTC rolls 2025-02-30 over into March: a rolled date was not a real one.
  if (start.getUTCFullYear() !== y || start.getUTCMonth() !== mo - 1 || start.getUTCDate() !== d) {
    return null;
  }
  return hourOf(start);
}

/** The hour containing `at`. */
export function hourOf(at: Date): ArchiveHour {
  const start = new Date(Math.floor(at.getTime() / HOUR_MS) * HOUR_MS);
  const pad = (n: number) => String(n).padStart(2, '0');
  const name = `${start.getUTCFullYear()}-${pad(start.getUTCMonth() + 1)}-${pad(start.getUTCDate())}-${start.getUTCHours()}`;
  return { name, start };
}

/** The file name of an hour on GH Archive (and on a mirror). */
export function hourFileName(hour: ArchiveHour): string {
  return `${hour.name}.json.gz`;
}

export function hourEnd(hour: ArchiveHour): Date {
  return new Date(hour.start.getTime() + HOUR_MS);
}

/** When the hour's file is expected to be on the archive. */
export function publishedAt(hour: ArchiveHour): Date {
  return new Date(hour.start.getTime() + HOUR_MS + PUBLISH_DELAY_MS);
}

/** Every hour that overlaps [from, to], in order. */
export function hoursCovering(from: Date, to: Date): ArchiveHour[] {
  const hours: ArchiveHour[] = [];
  for (let t = hourOf(from).start.getTime(); t <= to.getTime(); t += HOUR_MS) {
    hours.push(hourOf(new Date(t)));
  }
  return hours;
}

/** The hours a gap is read from: [from_at − 1 h, to_at + 2 h]. */
export function gapHours(gap: { from_at: Date; to_at: Date }): ArchiveHour[] {
  return hoursCovering(
    new Date(gap.from_at.getTime() - GAP_MARGIN_BEFORE_MS),
    new Date(gap.to_at.getTime() + GAP_MARGIN_AFTER_MS),
  );
}

/** When every hour of a gap is published: the fill's earliest start. */
export function gapReadyAt(gap: { from_at: Date; to_at: Date }): Date {
  return publishedAt(gapHours(gap).at(-1)!);
}

/** The end of the hour's retry window: an hour still unread then makes its gap `unavailable`. */
export function retryWindowEnd(hour: ArchiveHour): Date {
  return new Date(hourEnd(hour).getTime() + RETRY_WINDOW_MS);
}

/** GH Archive's first hour: nothing older was ever published there. */
export const ARCHIVE_FIRST_HOUR: ArchiveHour = hourOf(new Date('2011-02-12T00:00:00Z'));

/**
 * What bin/backfill says of an hour before fetching it, at `now`: an hour not over yet has
 * no file (refused: one in the future — `9999-01-01-1` — is a typo or a broken clock, and
 * would only ask the archive for nothing); one older than GH Archive is fetched, with a
 * warning, since a mirror may hold it.
 */
export function hourCheck(
  hour: ArchiveHour,
  now: Date,
  /** Where the hour will be asked for (a mirror, "every mirror in GHARCHIVE_URL"). */
  where = 'the first mirror in GHARCHIVE_URL',
): { refuse: string } | { warn: string } | null {
  if (hour.start > now) {
    return {
      refuse: `hour ${hour.name} is in the future (it starts ${hour.start.toISOString()}); nothing fetched`,
    };
  }
  if (hourEnd(hour) > now) {
    return {
      refuse: `hour ${hour.name} is not over yet (GH Archive publishes it after ${publishedAt(hour).toISOString()}); nothing fetched`,
    };
  }
  if (hour.start < ARCHIVE_FIRST_HOUR.start) {
    return {
      warn: `hour ${hour.name} is before GH Archive's first hour (${ARCHIVE_FIRST_HOUR.name}): data.gharchive.org has no file for it; asking ${where} anyway`,
    };
  }
  return null;
}
