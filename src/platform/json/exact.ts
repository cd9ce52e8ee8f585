import { AppError } from '../errors.ts';
import { JSON_LIMITS, type JsonExcessReason, type JsonLimits, jsonTextExcess } from './bounded.ts';

/**
 * JSON bodies from GitHub (feeds, profiles, webhooks) parsed so that no integer loses a
 * digit. GitHub ids are 64-bit; a JavaScript number holds 53 bits, so plain JSON.parse
 * turns 9999999999999999 into 10000000000000000. Node's JSON.parse hands a reviver the
 * source text of each primitive: an integer beyond 2^53 becomes a JSON.rawJSON value,
 * which JSON.stringify writes back digit for digit (so a stored payload stays exact) and
 * which exactId() reads as a decimal string.
 *
 * Depth and width: JSON.parse builds whatever the text describes, and a reviver (and
 * JSON.stringify) recurse. So the text is first measured against src/platform/json/bounded.ts's
 * limits without building anything; see parseJson for what happens to text over them.
 */

export interface RawJson {
  readonly rawJSON: string;
}

// Node >= 21 has both; TypeScript's lib does not declare them yet.
const NativeJson = JSON as JSON & {
  rawJSON(text: string): RawJson;
  isRawJSON(value: unknown): value is RawJson;
};

export function isRawJson(value: unknown): value is RawJson {
  return NativeJson.isRawJSON(value);
}

/** An exact integer for JSON output: JSON.stringify writes its digits as a number. */
export function jsonInteger(digits: string): RawJson {
  return NativeJson.rawJSON(digits);
}

/**
 * JSON text parsed with every number kept as written (`1.50`, 20 digits): a stored jsonb
 * value read, changed elsewhere and written back keeps its numbers byte for byte.
 */
export function parseJsonVerbatim(text: string): unknown {
  return JSON.parse(text, (_key: string, value: unknown, context?: { source?: string }) =>
    typeof value === 'number' && context?.source !== undefined
      ? NativeJson.rawJSON(context.source)
      : value,
  );
}

/** A JSON integer (as source text) that a double cannot hold exactly. */
const INTEGER_SOURCE = /^-?\d+$/;
/**
 * Only a number of 16+ digits can be an unsafe integer, and a JSON number follows `:`, `[`
 * or `,` (and whitespace). Without such a token plain JSON.parse is exact — the common case:
 * GitHub sends event ids as strings and its numeric ids are far shorter. (Digits inside a
 * string can match too; that costs the slow path, never exactness.)
 */
const LONG_NUMBER = /(?:^|[[:,])\s*-?\d{16}/;

function exactReviver(_key: string, value: unknown, context?: { source?: string }): unknown {
  if (
    typeof value === 'number' &&
    !Number.isSafeInteger(value) &&
    context?.source !== undefined &&
    INTEGER_SOURCE.test(context.source)
  ) {
    return NativeJson.rawJSON(context.source);
  }
  return value;
}

/** A whole document over the depth limit: never parsed. */
export class JsonTooDeep extends AppError {
  readonly reason = 'too_deep';
  constructor(bytes: number, detail = 'is nested too deep to read') {
    super('JSON_TOO_DEEP', `JSON document of ${bytes} characters ${detail}`, { bytes });
  }
}

/** A whole document holding more values than the limit: never parsed. */
export class JsonTooWide extends AppError {
  readonly reason = 'too_wide';
  constructor(bytes: number, detail: string) {
    super('JSON_TOO_WIDE', `JSON document of ${bytes} characters ${detail}`, { bytes });
  }
}

/**
 * An element of a top-level array over the limits, never parsed; `text` is its source
 * (a slice of the page), `reason` which limit it passed.
 */
export class TooDeepJson {
  readonly text: string;
  readonly reason: JsonExcessReason;
  readonly detail: string;
  constructor(text: string, reason: JsonExcessReason = 'too_deep', detail = '') {
    this.text = text;
    this.reason = reason;
    this.detail = detail;
  }
}

function parseExact(text: string): unknown {
  return LONG_NUMBER.test(text) ? JSON.parse(text, exactReviver) : JSON.parse(text);
}

function firstChar(text: string): number {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c > 0x20) return c;
  }
  return -1;
}

/**
 * Parses JSON text exactly (see above), within `limits` (src/platform/json/bounded.ts), checked
 * before anything is built. A top-level array (an events page) may hold one more level:
 * its elements are judged against the limits one by one, and an element over them comes
 * back as a TooDeepJson marker, so one hostile event cannot cost the page. Any other
 * document over the limits throws JsonTooDeep or JsonTooWide; text that is not JSON,
 * SyntaxError. Within the limits it accepts exactly what JSON.parse accepts.
 */
export function parseJson(text: string, limits: JsonLimits = JSON_LIMITS): unknown {
  const isArray = firstChar(text) === 0x5b;
  const whole = jsonTextExcess(
    text,
    isArray ? { ...limits, maxDepth: limits.maxDepth + 1 } : limits,
  );
  if (whole === null) return parseExact(text);
  if (!isArray) {
    if (whole.reason === 'too_wide') throw new JsonTooWide(text.length, whole.message);
    throw new JsonTooDeep(text.length, whole.message);
  }
  return topLevelElements(text).map((slice) => {
    const over = jsonTextExcess(slice, limits);
    return over ? new TooDeepJson(slice, over.reason, over.message) : parseExact(slice);
  });
}

const SPACE = (c: number) => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;

/**
 * The source text of each element of a top-level JSON array, found by one iterative pass
 * that tracks nesting and string state (string contents skipped with indexOf). Throws
 * SyntaxError when the array itself is broken: no `[`, an empty element (`[1,,2]`, `[1,]`),
 * an unterminated string, unbalanced brackets, or anything after the closing `]`. What is
 * inside each element is for JSON.parse to judge.
 */
export function topLevelElements(text: string): string[] {
  const broken = (why: string) => new SyntaxError(`JSON array: ${why}`);
  const out: string[] = [];
  let i = 0;
  while (i < text.length && SPACE(text.charCodeAt(i))) i++;
  if (text.charCodeAt(i) !== 0x5b) throw broken('not an array');
  let depth = 1;
  let start = -1;
  let expectElement = false; // after a comma
  for (i++; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (depth === 0) {
      if (!SPACE(c)) throw broken('text after the closing bracket');
      continue;
    }
    if (c === 0x22) {
      if (depth === 1 && start < 0) start = i;
      let q = text.indexOf('"', i + 1);
      for (;;) {
        if (q === -1) throw broken('unterminated string');
        let k = q - 1;
        while (k > i && text.charCodeAt(k) === 0x5c) k--;
        if ((q - 1 - k) % 2 === 0) break;
        q = text.indexOf('"', q + 1);
      }
      i = q;
    } else if (c === 0x5b || c === 0x7b) {
      if (depth === 1 && start < 0) start = i;
      depth++;
    } else if (c === 0x5d || c === 0x7d) {
      if (depth === 1) {
        if (c !== 0x5d) throw broken('unbalanced brackets');
        if (start >= 0) out.push(text.slice(start, i).trim());
        else if (expectElement) throw broken('empty element');
        start = -1;
      }
      depth--;
    } else if (c === 0x2c && depth === 1) {
      if (start < 0) throw broken('empty element');
      out.push(text.slice(start, i).trim());
      start = -1;
      expectElement = true;
    } else if (depth === 1 && start < 0 && !SPACE(c)) {
      start = i; // a number, true, false or null
    }
  }
  if (depth !== 0) throw broken('unbalanced brackets');
  return out;
}

const MAX_INT8 = 9223372036854775807n;

/** Canonical decimal text of at most 18 digits: below 10^18, so within bigint as it is. */
const CANONICAL_SHORT_ID = /^(?:0|[1-9]\d{0,17})$/;

/**
 * A GitHub id as its canonical decimal string, or null when the value is not one: a
 * non-negative integer that fits Postgres bigint, given as a JSON number (exact when it
 * came through parseJson) or as a string of digits.
 */
export function exactId(value: unknown): string | null {
  let digits: string;
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value) || value < 0) return null;
    return String(value);
  }
  if (typeof value === 'string') digits = value;
  else if (isRawJson(value)) digits = value.rawJSON;
  else return null;
  // Canonical and below 10^18 (so within bigint): the text is the answer, no BigInt needed.
  if (CANONICAL_SHORT_ID.test(digits)) return digits;
  if (!/^\d{1,19}$/.test(digits)) return null;
  const n = BigInt(digits);
  return n <= MAX_INT8 ? n.toString() : null;
}

/** Orders canonical decimal id strings numerically (shorter is smaller; no leading zeros). */
export function compareIds(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}
