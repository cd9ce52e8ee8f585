import { decodeUtf8KeepingInvalid } from './utf8.ts';

/**
 * JSON read from bytes as they arrive, never held whole (ADR 0182): a 31 MB answer read as
 * text and then parsed was several copies of itself at once (the bytes, the text, the parsed
 * strings) — 128 MB of worker became 412. Here each chunk is parsed and dropped, and what is
 * built is bounded whatever the answer says:
 *
 * - a string (value or key) longer than `maxString` characters is kept as its first
 *   `maxString`; a reader cutting at fewer (a message at 65,536, a name at 1,024) sees what it
 *   saw before, and one that refuses a longer string still sees it is longer;
 * - the text kept over the whole document is at most `maxText` characters: past it the
 *   answer is refused (too_much_text), as one over its byte cap is;
 * - depth and values as src/platform/json/bounded.ts limits them (too_deep, too_wide);
 * - the values of the top-level keys in `skipTopLevel` are read (they must be JSON) but never
 *   built (a compare's `files`: patches nothing here reads).
 *
 * Within those bounds it accepts what JSON.parse accepts and builds what it builds: the same
 * strings (escapes, lone surrogates; bytes that are not UTF-8 kept distinguishable, as
 * src/platform/json/utf8.ts does), numbers (an integer a double cannot hold exactly as JSON.rawJSON,
 * as src/platform/json/exact.ts does), `__proto__` as an own key.
 */

export interface JsonStreamLimits {
  maxDepth: number;
  maxValues: number;
  /** Characters kept of one string; a longer one is cut to this many. */
  maxString: number;
  /** Characters of strings (and keys) kept over the whole document. */
  maxText: number;
  /** Keys of the top-level object whose values are checked but never built. */
  skipTopLevel?: readonly string[];
}

export type JsonStreamFault = 'syntax' | 'too_deep' | 'too_wide' | 'too_much_text';

export class JsonStreamError extends Error {
  readonly reason: JsonStreamFault;
  /** Byte offset in the document where it was found. */
  readonly at: number;
  constructor(reason: JsonStreamFault, at: number, detail: string) {
    super(`${detail} (at byte ${at})`);
    this.name = 'JsonStreamError';
    this.reason = reason;
    this.at = at;
  }
}

export interface JsonStreamParser {
  /** The next bytes of the document. Throws JsonStreamError as soon as it is over a limit or not JSON. */
  write(chunk: Uint8Array): void;
  /** The document is complete: its value, or JsonStreamError. */
  end(): unknown;
  /** Bytes written so far. */
  readonly bytes: number;
}

// States: what the next significant byte may be.
const VALUE = 0;
const ARRAY_FIRST = 1; // a value or `]`
const KEY_FIRST = 2; // a key or `}`
const KEY = 3;
const COLON = 4;
const NEXT = 5; // `,` or the container's end
const STRING = 6;
const NUMBER = 7;
const LITERAL = 8;
const DONE = 9;

// Where a string's bytes are: plain, after a backslash, in \uXXXX, in a UTF-8 sequence.
const PLAIN = 0;
const ESCAPE = 1;
const HEX = 2;
const UTF8 = 3;
/** The characters a backslash may escape besides `u`: " \ / b f n r t. */
const ESCAPES = new Set([0x22, 0x5c, 0x2f, 0x62, 0x66, 0x6e, 0x72, 0x74]);
const isHex = (c: number) =>
  (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);

const MAX_NUMBER = 4096;
const NUMBER_SOURCE = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;
const INTEGER_SOURCE = /^-?\d+$/;

const NativeJson = JSON as JSON & { rawJSON(text: string): unknown };

interface Frame {
  array: boolean;
  /** What is built; null while skipping (the value is checked, never kept). */
  value: unknown[] | Record<string, unknown> | null;
  key: string | null;
}

const isSpace = (c: number) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

export function jsonStreamParser(limits: JsonStreamLimits): JsonStreamParser {
  const skipKeys = new Set(limits.skipTopLevel ?? []);
  // A kept string's source bytes: at most 6 a character (`\uXXXX`), plus what a cut needs.
  const scratch = new Uint8Array(6 * (limits.maxString + 1));
  const stack: Frame[] = [];
  let state = VALUE;
  let offset = 0;
  let values = 0;
  let text = 0;
  let root: unknown;
  // The string being read.
  let strKey = false;
  let strSkip = false;
  let strLen = 0; // bytes kept in scratch
  let strSafe = 0; // a cut here splits no escape and no UTF-8 sequence
  let strCut = false;
  let strMode = PLAIN;
  let strOwed = 0; // hex digits, or UTF-8 continuation bytes, still owed
  // The number or literal being read.
  let token = '';

  const fail = (reason: JsonStreamFault, detail: string): never => {
    throw new JsonStreamError(reason, offset, detail);
  };
  const skipping = () => stack.length > 0 && stack[stack.length - 1]!.value === null;

  function count(): void {
    if (++values > limits.maxValues) {
      fail('too_wide', `the document holds more than ${limits.maxValues} values`);
    }
  }

  /** A value is complete: it goes into its container (unless skipped), or is the document. */
  function place(v: unknown, keep: boolean): void {
    const top = stack[stack.length - 1];
    if (!top) {
      root = v;
      state = DONE;
      return;
    }
    if (keep && top.value !== null) {
      if (top.array) (top.value as unknown[]).push(v);
      else {
        const o = top.value as Record<string, unknown>;
        const key = top.key!;
        if (key === '__proto__') {
          Object.defineProperty(o, key, {
            value: v,
            writable: true,
            enumerable: true,
            configurable: true,
          });
        } else o[key] = v;
      }
    }
    state = NEXT;
  }

  /** Whether the value about to start under the top frame is one to check but not build. */
  function startsSkipped(): boolean {
    if (skipping()) return true;
    const top = stack[stack.length - 1];
    return stack.length === 1 && top !== undefined && !top.array && skipKeys.has(top.key!);
  }

  function open(array: boolean): void {
    count();
    if (stack.length + 1 > limits.maxDepth) {
      fail('too_deep', `a value is nested deeper than ${limits.maxDepth} levels`);
    }
    const skip = startsSkipped();
    stack.push({ array, value: skip ? null : array ? [] : {}, key: null });
    state = array ? ARRAY_FIRST : KEY_FIRST;
  }

  function close(array: boolean): void {
    const top = stack.pop()!;
    if (top.array !== array) fail('syntax', `unexpected ${array ? ']' : '}'}`);
    place(top.value, top.value !== null);
  }

  function beginString(key: boolean): void {
    strKey = key;
    strSkip = !key && startsSkipped();
    strLen = 0;
    strSafe = 0;
    strCut = false;
    strMode = PLAIN;
    strOwed = 0;
    state = STRING;
  }

  function endString(): void {
    let s = '';
    if (!strSkip || strKey) {
      const kept = scratch.subarray(0, strCut ? strSafe : strLen);
      let raw = decodeUtf8KeepingInvalid(kept);
      if (raw.includes('\\')) {
        try {
          raw = JSON.parse(`"${raw}"`) as string;
        } catch {
          fail('syntax', 'a string that is not JSON');
        }
      }
      // The whole of what was decoded is counted: a cut string is a slice of it.
      text += raw.length;
      if (text > limits.maxText) {
        fail('too_much_text', `the document holds more than ${limits.maxText} characters of text`);
      }
      s = raw.length > limits.maxString ? raw.slice(0, limits.maxString) : raw;
    }
    if (strKey) {
      stack[stack.length - 1]!.key = s;
      state = COLON;
      return;
    }
    count();
    place(s, !strSkip);
  }

  function endToken(): void {
    const keep = !startsSkipped();
    count();
    if (state === LITERAL) {
      const v = token === 'true' ? true : token === 'false' ? false : token === 'null' ? null : 0;
      if (v === 0) fail('syntax', `unexpected ${JSON.stringify(token.slice(0, 20))}`);
      token = '';
      place(v, keep);
      return;
    }
    if (!NUMBER_SOURCE.test(token))
      fail('syntax', `a number that is not JSON: ${token.slice(0, 40)}`);
    const n = Number(token);
    const v =
      !Number.isSafeInteger(n) && INTEGER_SOURCE.test(token) ? NativeJson.rawJSON(token) : n;
    token = '';
    place(v, keep);
  }

  /** One byte of a string's content (state STRING); false when it closed the string. */
  function stringByte(c: number): boolean {
    if (strMode === ESCAPE) {
      if (c === 0x75) {
        strMode = HEX;
        strOwed = 4;
      } else if (ESCAPES.has(c)) strMode = PLAIN;
      else fail('syntax', `a string with the escape \\${String.fromCharCode(c)}`);
    } else if (strMode === HEX) {
      if (!isHex(c)) fail('syntax', 'a string with a \\u escape that is not 4 hex digits');
      if (--strOwed === 0) strMode = PLAIN;
    } else {
      if (strMode === UTF8) {
        if (c >= 0x80 && c <= 0xbf) {
          if (--strOwed === 0) strMode = PLAIN;
          return keep(c);
        }
        // A sequence cut short: this byte stands on its own (utf8.ts keeps the ones before).
        strMode = PLAIN;
      }
      if (c === 0x22) return false;
      if (c < 0x20) fail('syntax', 'a control character in a string');
      if (c === 0x5c) strMode = ESCAPE;
      else {
        strOwed = leadLength(c);
        if (strOwed > 0) strMode = UTF8;
      }
    }
    return keep(c);
  }

  /** Plain ASCII bytes [from, to) of the string being read. */
  function keepRun(chunk: Uint8Array, from: number, to: number): void {
    if (strSkip && !strKey) return;
    const room = scratch.length - strLen;
    const k = Math.min(room, to - from);
    if (k > 0) {
      scratch.set(chunk.subarray(from, from + k), strLen);
      strLen += k;
      strSafe = strLen;
    }
    if (k < to - from) strCut = true;
  }

  function keep(c: number): true {
    if (strSkip && !strKey) return true;
    if (strLen < scratch.length) {
      scratch[strLen++] = c;
      if (strMode === PLAIN) strSafe = strLen;
    } else strCut = true;
    return true;
  }

  function leadLength(c: number): number {
    if (c >= 0xc2 && c <= 0xdf) return 1;
    if (c >= 0xe0 && c <= 0xef) return 2;
    if (c >= 0xf0 && c <= 0xf4) return 3;
    return 0;
  }

  function step(c: number): void {
    switch (state) {
      case STRING:
        if (!stringByte(c)) endString();
        return;
      case NUMBER:
        if (
          (c >= 0x30 && c <= 0x39) ||
          c === 0x2e ||
          c === 0x65 ||
          c === 0x45 ||
          c === 0x2b ||
          c === 0x2d
        ) {
          if (token.length >= MAX_NUMBER)
            fail('syntax', `a number of more than ${MAX_NUMBER} characters`);
          token += String.fromCharCode(c);
          return;
        }
        endToken();
        step(c);
        return;
      case LITERAL:
        if (c >= 0x61 && c <= 0x7a) {
          if (token.length >= 5) fail('syntax', `unexpected ${JSON.stringify(token)}`);
          token += String.fromCharCode(c);
          return;
        }
        endToken();
        step(c);
        return;
    }
    if (isSpace(c)) return;
    switch (state) {
      case ARRAY_FIRST:
        if (c === 0x5d) {
          close(true);
          return;
        }
        state = VALUE;
        step(c);
        return;
      case VALUE:
        if (c === 0x7b) {
          open(false);
          return;
        }
        if (c === 0x5b) {
          open(true);
          return;
        }
        if (c === 0x22) {
          beginString(false);
          return;
        }
        if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
          token = String.fromCharCode(c);
          state = NUMBER;
          return;
        }
        if (c === 0x74 || c === 0x66 || c === 0x6e) {
          token = String.fromCharCode(c);
          state = LITERAL;
          return;
        }
        fail('syntax', `unexpected byte 0x${c.toString(16)} where a value begins`);
        return;
      case KEY_FIRST:
        if (c === 0x7d) {
          close(false);
          return;
        }
        if (c === 0x22) {
          beginString(true);
          return;
        }
        fail('syntax', 'an object key that is not a string');
        return;
      case KEY:
        if (c === 0x22) {
          beginString(true);
          return;
        }
        fail('syntax', 'an object key that is not a string');
        return;
      case COLON:
        if (c === 0x3a) {
          state = VALUE;
          return;
        }
        fail('syntax', 'no `:` after an object key');
        return;
      case NEXT: {
        const top = stack[stack.length - 1]!;
        if (c === 0x2c) {
          state = top.array ? VALUE : KEY;
          return;
        }
        if (c === 0x5d && top.array) {
          close(true);
          return;
        }
        if (c === 0x7d && !top.array) {
          close(false);
          return;
        }
        fail('syntax', `unexpected byte 0x${c.toString(16)} after a value`);
        return;
      }
      case DONE:
        fail('syntax', 'more after the end of the document');
        return;
    }
  }

  return {
    write(chunk: Uint8Array): void {
      const n = chunk.length;
      let i = 0;
      while (i < n) {
        if (state === STRING && strMode === PLAIN) {
          // Most of an answer is string content: a run of plain ASCII in one tight loop.
          let j = i;
          for (; j < n; j++) {
            const c = chunk[j]!;
            if (c === 0x22 || c === 0x5c || c < 0x20 || c >= 0x80) break;
          }
          if (j > i) {
            keepRun(chunk, i, j);
            offset += j - i;
            i = j;
            if (i >= n) break;
          }
        }
        step(chunk[i]!);
        offset++;
        i++;
      }
    },
    end(): unknown {
      if (state === NUMBER || state === LITERAL) endToken();
      if (state !== DONE) fail('syntax', 'the document ends early');
      return root;
    },
    get bytes() {
      return offset;
    },
  };
}
