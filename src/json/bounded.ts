/**
 * Limits on JSON from outside (archive lines, poll pages, webhook bodies), enforced BEFORE a
 * value is built. JSON.parse builds whatever the text describes: one 6 MB line nested
 * 3,000,000 deep is 3,000,000 arrays (hundreds of MB of heap, and every walk over them
 * after), and an 8 MB line of `{},{},…` is 2.8 million objects (~260 MB). So the text is
 * scanned first — one pass, no allocation, string contents skipped with indexOf — and a
 * document over a limit is never parsed at all (ADR 0060).
 *
 * The scan counts brackets outside strings (honouring backslash escapes) and values (an
 * opening bracket or a comma outside strings starts one). It does not validate: text
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
        ? `nested deeper than ${limits.maxDepth} levels (at offset ${at})`
        : `holds more than ${limits.maxValues} values (at offset ${at})`,
  };
}

/**
 * Index of the quote closing the string whose opening quote is at `open`, or -1 when the
 * string never ends. A quote preceded by an odd run of backslashes is escaped. Each run of
 * backslashes is counted once, so the search is linear in the text.
 */
function closingQuote(
  at: (i: number) => number,
  find: (from: number) => number,
  open: number,
): number {
  let q = find(open + 1);
  while (q !== -1) {
    let k = q - 1;
    while (k > open && at(k) === BACKSLASH) k--;
    if ((q - 1 - k) % 2 === 0) return q;
    q = find(q + 1);
  }
  return -1;
}

function scan(
  length: number,
  at: (i: number) => number,
  find: (from: number) => number,
  limits: JsonLimits,
): JsonExcess | null {
  let depth = 0;
  let values = 1;
  for (let i = 0; i < length; i++) {
    const c = at(i);
    if (c === QUOTE) {
      const end = closingQuote(at, find, i);
      if (end === -1) return null; // unterminated: JSON.parse says so
      i = end;
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (++depth > limits.maxDepth) return excess('too_deep', i, limits);
      if (++values > limits.maxValues) return excess('too_wide', i, limits);
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      if (depth > 0) depth--;
    } else if (c === COMMA) {
      if (++values > limits.maxValues) return excess('too_wide', i, limits);
    }
  }
  return null;
}

/** Why this JSON text is over the limits, or null when it is within them (valid or not). */
export function jsonTextExcess(text: string, limits: JsonLimits = JSON_LIMITS): JsonExcess | null {
  return scan(
    text.length,
    (i) => text.charCodeAt(i),
    (from) => text.indexOf('"', from),
    limits,
  );
}

/**
 * The same for UTF-8 bytes (an archive line, before it is decoded): every structural
 * character is ASCII, and no byte of a multi-byte UTF-8 sequence is below 0x80.
 */
export function jsonBytesExcess(
  bytes: Uint8Array,
  limits: JsonLimits = JSON_LIMITS,
): JsonExcess | null {
  const buf = Buffer.isBuffer(bytes)
    ? bytes
    : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
  return scan(
    buf.length,
    (i) => buf[i]!,
    (from) => buf.indexOf(QUOTE, from),
    limits,
  );
}
