/**
 * Limits on JSON from outside (archive lines, poll pages, webhook bodies), enforced BEFORE a
 * value is built. JSON.parse builds whatever the text describes: one 6 MB line nested
 * 3,000,000 deep is 3,000,000 arrays (hundreds of MB of heap, and every walk over them
 * after), and an 8 MB line of `{},{},…` is 2.8 million objects (~260 MB). So the text is
 * scanned first — one pass, no allocation — and a
 * document over a limit is never parsed at all (ADR 0060).
 *
 * The scan counts brackets outside strings (honouring backslash escapes) and values (the
 * document, and in each container its elements: commas outside strings, plus its first). It does not validate: text
 * within the limits goes to JSON.parse, which gives its own verdict, so what is accepted
 * within the limits is exactly what JSON.parse accepts.
 */

/** Deepest nesting we store (GitHub's payloads are under 10 levels deep). */
export const MAX_JSON_DEPTH = 64;
/**
 * Most values in one document (an event, a line, a webhook body). A 2,048-commit push
 * webhook holds ~60,000; an archive event a few hundred. 250,000 empty objects cost ~30 MB.
 */
export const MAX_JSON_VALUES = 250_000;

export interface JsonLimits {
  /** Containers nested deeper than this are refused (the top-level container is depth 1). */
  maxDepth: number;
  /** Values (scalars and containers) beyond this are refused. */
  maxValues: number;
}

export const JSON_LIMITS: JsonLimits = { maxDepth: MAX_JSON_DEPTH, maxValues: MAX_JSON_VALUES };

export type JsonExcessReason = 'too_deep' | 'too_wide';

export interface JsonExcess {
  reason: JsonExcessReason;
  /** Character (or byte) offset at which the limit was passed. */
  at: number;
  message: string;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const OPEN_OBJECT = 0x7b;
const CLOSE_ARRAY = 0x5d;
const CLOSE_OBJECT = 0x7d;
const COMMA = 0x2c;

function excess(reason: JsonExcessReason, at: number, limits: JsonLimits): JsonExcess {
  return {
    reason,
    at,
    message:
      reason === 'too_deep'
        ? `value at offset ${at} is nested deeper than ${limits.maxDepth} levels`
        : `document holds more than ${limits.maxValues} values (at offset ${at})`,
  };
}

const MAX_PATH_KEY = 40;

/**
 * The path (`payload.a[0][3]`, as inspectJson writes it) of the container opening at `at`,
 * found by scanning the text before it again. Only called once a limit was passed, and the
 * stack it keeps is at most maxDepth frames deep.
 */
function pathTo(text: string, at: number): string {
  const frames: { array: boolean; index: number; key: string; wantKey: boolean }[] = [];
  for (let i = 0; i < at; i++) {
    const c = text.charCodeAt(i);
    const top = frames[frames.length - 1];
    if (c === QUOTE) {
      const end = closingQuote(text, i);
      if (end === -1 || end > at) break;
      if (top && !top.array && top.wantKey) {
        let key: string;
        try {
          key = JSON.parse(text.slice(i, end + 1)) as string;
        } catch {
          key = text.slice(i + 1, end);
        }
        top.key = key.length > MAX_PATH_KEY ? `${key.slice(0, MAX_PATH_KEY)}…` : key;
        top.wantKey = false;
      }
      i = end;
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      frames.push({ array: c === OPEN_ARRAY, index: 0, key: '', wantKey: c === OPEN_OBJECT });
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      frames.pop();
    } else if (c === COMMA && top) {
      if (top.array) top.index++;
      else top.wantKey = true;
    }
  }
  let path = '';
  for (const f of frames) {
    if (f.array) path += `[${f.index}]`;
    else path = path ? `${path}.${f.key}` : f.key;
  }
  return path || 'value';
}

function withPath(found: JsonExcess | null, text: () => string, limits: JsonLimits) {
  if (found?.reason !== 'too_deep') return found;
  const path = pathTo(text(), found.at);
  return { ...found, message: `${path} is nested deeper than ${limits.maxDepth} levels` };
}

/**
 * Index of the quote closing the string whose opening quote is at `open`, or -1 when the
 * string never ends. A quote preceded by an odd run of backslashes is escaped. Each run of
 * backslashes is counted once, so the search is linear in the text.
 */
function closingQuote(text: string, open: number): number {
  let q = text.indexOf('"', open + 1);
  while (q !== -1) {
    let k = q - 1;
    while (k > open && text.charCodeAt(k) === BACKSLASH) k--;
    if ((q - 1 - k) % 2 === 0) return q;
    q = text.indexOf('"', q + 1);
  }
  return -1;
}

/**
 * True when no text of this length with this few opening brackets (anywhere, strings
 * included) can pass the limits: values are at most the bytes, depth at most the brackets.
 * Most lines are proved within the limits this way by a few native indexOf calls, and the
 * full scan below runs only on the rest (it costs about what JSON.parse does).
 */
function provablyWithin(
  length: number,
  find: (c: number, from: number) => number,
  limits: JsonLimits,
): boolean {
  if (length > limits.maxValues) return false;
  let opens = 0;
  for (const c of [OPEN_OBJECT, OPEN_ARRAY]) {
    for (let i = find(c, 0); i !== -1; i = find(c, i + 1)) {
      if (++opens > limits.maxDepth) return false;
    }
  }
  return true;
}

// Two copies of one loop, for bytes and for text: indexing a Uint8Array and calling
// charCodeAt are each fast when the loop sees only one of them (a shared loop over an
// accessor ran at half the speed: it is on the path of every push line of the archive).
// String contents are skipped in the loop itself: GitHub's strings are short, and a
// native indexOf per string cost more than it saved. Control characters outside strings
// count as space (JSON.parse refuses them anyway).

function scanBytes(b: Uint8Array, limits: JsonLimits): JsonExcess | null {
  const { maxDepth, maxValues } = limits;
  const n = b.length;
  let depth = 0;
  // The document itself, then per container its elements: its commas, plus one when it is
  // not empty (known at the first character after its opening bracket that is not space).
  let values = 1;
  let opened = false;
  for (let i = 0; i < n; i++) {
    const c = b[i]!;
    if (c <= 0x20) continue;
    if (opened) {
      opened = false;
      if (c !== CLOSE_ARRAY && c !== CLOSE_OBJECT && ++values > maxValues) {
        return excess('too_wide', i, limits);
      }
    }
    if (c === QUOTE) {
      for (i++; i < n; i++) {
        const d = b[i]!;
        if (d === QUOTE) break;
        if (d === BACKSLASH) i++;
      }
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (++depth > maxDepth) return excess('too_deep', i, limits);
      opened = true;
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      if (depth > 0) depth--;
    } else if (c === COMMA && ++values > maxValues) {
      return excess('too_wide', i, limits);
    }
  }
  return null;
}

function scanText(t: string, limits: JsonLimits): JsonExcess | null {
  const { maxDepth, maxValues } = limits;
  const n = t.length;
  let depth = 0;
  let values = 1;
  let opened = false;
  for (let i = 0; i < n; i++) {
    const c = t.charCodeAt(i);
    if (c <= 0x20) continue;
    if (opened) {
      opened = false;
      if (c !== CLOSE_ARRAY && c !== CLOSE_OBJECT && ++values > maxValues) {
        return excess('too_wide', i, limits);
      }
    }
    if (c === QUOTE) {
      for (i++; i < n; i++) {
        const d = t.charCodeAt(i);
        if (d === QUOTE) break;
        if (d === BACKSLASH) i++;
      }
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (++depth > maxDepth) return excess('too_deep', i, limits);
      opened = true;
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      if (depth > 0) depth--;
    } else if (c === COMMA && ++values > maxValues) {
      return excess('too_wide', i, limits);
    }
  }
  return null;
}

/** Why this JSON text is over the limits, or null when it is within them (valid or not). */
export function jsonTextExcess(text: string, limits: JsonLimits = JSON_LIMITS): JsonExcess | null {
  if (
    provablyWithin(
      text.length,
      (c, from) => text.indexOf(c === OPEN_ARRAY ? '[' : '{', from),
      limits,
    )
  ) {
    return null;
  }
  const found = scanText(text, limits);
  return withPath(found, () => text, limits);
}

/**
 * The same for UTF-8 bytes (an archive line, before it is decoded): every structural
 * character is ASCII, and no byte of a multi-byte UTF-8 sequence is below 0x80.
 */
export function jsonBytesExcess(
  bytes: Uint8Array,
  limits: JsonLimits = JSON_LIMITS,
): JsonExcess | null {
  if (provablyWithin(bytes.length, (c, from) => bytes.indexOf(c, from), limits)) return null;
  const found = scanBytes(bytes, limits);
  // The path is read from the text before the limit: `at` becomes that text's length.
  if (found?.reason !== 'too_deep') return found;
  const before = Buffer.from(bytes.buffer, bytes.byteOffset, found.at).toString('utf8');
  return withPath({ ...found, at: before.length }, () => before, limits);
}
