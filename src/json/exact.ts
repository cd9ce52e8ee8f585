import { AppError } from '../errors.ts';

/**
 * JSON bodies from GitHub (feeds, profiles, webhooks) parsed so that no integer loses a
 * digit. GitHub ids are 64-bit; a JavaScript number holds 53 bits, so plain JSON.parse
 * turns 9999999999999999 into 10000000000000000. Node's JSON.parse hands a reviver the
 * source text of each primitive: an integer beyond 2^53 becomes a JSON.rawJSON value,
 * which JSON.stringify writes back digit for digit (so a stored payload stays exact) and
 * which exactId() reads as a decimal string.
 *
 * Depth: JSON.parse itself is iterative, but a reviver (and JSON.stringify) recurse, and
 * run out of stack a few thousand levels down. A top-level array (an events page) whose
 * elements are too deep for the reviver is parsed element by element, and each element
 * that is still too deep comes back as a TooDeepJson marker holding its text, so one
 * hostile event cannot cost the page. Any other document that deep throws JsonTooDeep.
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

/** A whole document nested too deep to read exactly. */
export class JsonTooDeep extends AppError {
  constructor(bytes: number) {
    super('JSON_TOO_DEEP', `JSON document of ${bytes} characters is nested too deep to read`, {
      bytes,
    });
  }
}

/** An element of a top-level array that was nested too deep to read; `text` is its source. */
export class TooDeepJson {
  readonly text: string;
  constructor(text: string) {
    this.text = text;
  }
}

function isStackOverflow(err: unknown): boolean {
  return err instanceof RangeError;
}

/**
 * Parses JSON text exactly (see above). Throws SyntaxError for text that is not JSON,
 * JsonTooDeep for a non-array document too deep for the reviver.
 */
export function parseJson(text: string): unknown {
  if (!LONG_NUMBER.test(text)) return JSON.parse(text);
  try {
    return JSON.parse(text, exactReviver);
  } catch (err) {
    if (!isStackOverflow(err)) throw err;
  }
  // Valid JSON? (iterative: this cannot overflow; a SyntaxError here is the real answer)
  const plain: unknown = JSON.parse(text);
  if (!Array.isArray(plain)) throw new JsonTooDeep(text.length);
  return topLevelElements(text).map((slice) => {
    try {
      return JSON.parse(slice, exactReviver);
    } catch (err) {
      if (isStackOverflow(err)) return new TooDeepJson(slice);
      throw err;
    }
  });
}

/**
 * The source text of each element of a top-level JSON array, found by one iterative pass
 * that tracks nesting and string state. Only called on text JSON.parse accepted.
 */
export function topLevelElements(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let inString = false;
  let start = -1;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) {
      inString = true;
      if (depth === 1 && start < 0) start = i;
    } else if (c === 0x5b || c === 0x7b) {
      depth++;
      if (depth === 2 && start < 0) start = i;
    } else if (c === 0x5d || c === 0x7d) {
      if (depth === 1 && start >= 0) {
        out.push(text.slice(start, i).trim());
        start = -1;
      }
      depth--;
    } else if (c === 0x2c && depth === 1) {
      out.push(text.slice(start, i).trim());
      start = -1;
    } else if (depth === 1 && start < 0 && c > 0x20) {
      start = i; // a number, true, false or null
    }
  }
  return out;
}

const MAX_INT8 = 9223372036854775807n;

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
  if (!/^\d{1,19}$/.test(digits)) return null;
  const n = BigInt(digits);
  return n <= MAX_INT8 ? n.toString() : null;
}

/** Orders canonical decimal id strings numerically (shorter is smaller; no leading zeros). */
export function compareIds(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}
