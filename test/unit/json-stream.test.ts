import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseJson } from '../../src/platform/json/exact.ts';
import {
  JsonStreamError,
  type JsonStreamLimits,
  jsonStreamParser,
} from '../../src/platform/json/stream.ts';
import { decodeUtf8KeepingInvalid } from '../../src/platform/json/utf8.ts';

/**
 * The streaming reader of answers (src/platform/json/stream.ts, ADR 0182) builds what the text
 * reader (parseJson: JSON.parse, exact integers) builds, whatever the chunks' boundaries,
 * and refuses what it refuses; past its bounds it cuts or refuses, never holds more.
 */

const WIDE: JsonStreamLimits = {
  maxDepth: 64,
  maxValues: 250_000,
  maxString: 100_000,
  maxText: 10_000_000,
};

/** `bytes` written in chunks cut at `cuts` (offsets), then ended. */
function parseChunked(bytes: Uint8Array, cuts: number[], limits = WIDE): unknown {
  const p = jsonStreamParser(limits);
  let at = 0;
  for (const cut of [...new Set(cuts)].sort((a, b) => a - b)) {
    if (cut <= at || cut >= bytes.length) continue;
    p.write(bytes.subarray(at, cut));
    at = cut;
  }
  p.write(bytes.subarray(at));
  return p.end();
}

const utf8 = (s: string) => new TextEncoder().encode(s);

function outcome(f: () => unknown): { ok: unknown } | { error: true } {
  try {
    return { ok: f() };
  } catch {
    return { error: true };
  }
}

describe('a JSON document read as it streams in', () => {
  it('builds what the text reader builds, whatever the chunks (property)', () => {
    fc.assert(
      fc.property(
        fc.jsonValue({ maxDepth: 6 }),
        fc.array(fc.nat(), { maxLength: 12 }),
        (value, cuts) => {
          const text = JSON.stringify(value);
          const bytes = utf8(text);
          expect(
            parseChunked(
              bytes,
              cuts.map((c) => c % (bytes.length + 1)),
            ),
          ).toEqual(parseJson(text));
        },
      ),
      { numRuns: 400 },
    );
  });

  it('accepts and refuses what the text reader does, byte by byte', () => {
    const docs = [
      '{"a": [1, 2.5, -0.5e-3, true, false, null, "x\\n\\u00e9\\ud83d\\ude00"]}',
      '  [ ]  ',
      '{}',
      '"\\u0041\\/"',
      '12345678901234567890',
      '{"id": 9007199254740993, "n": -9007199254740993}',
      '{"__proto__": {"polluted": 1}}',
      '[1,]',
      '[01]',
      '{"a" 1}',
      '{"a": 1,}',
      '[1 2]',
      '"\\x"',
      '"\\u12"',
      '"a\u0001b"',
      'tru',
      'nul',
      '[1]]',
      '{"a":1}{',
      '-',
      '1.',
      '.5',
      '1e',
      '',
      '   ',
      '[',
      '{"a":',
      '"unterminated',
      '\ufeff{}',
    ];
    for (const doc of docs) {
      const bytes = utf8(doc);
      const cuts = Array.from({ length: bytes.length }, (_, i) => i);
      const streamed = outcome(() => parseChunked(bytes, cuts));
      const whole = outcome(() => parseJson(doc));
      expect(streamed, doc).toEqual(whole);
    }
    const proto = parseChunked(utf8('{"__proto__": {"polluted": 1}}'), []) as object;
    expect(Object.getPrototypeOf(proto)).toBe(Object.prototype);
    expect(Object.hasOwn(proto, '__proto__')).toBe(true);
    expect(({} as { polluted?: number }).polluted).toBeUndefined();
  });

  it('keeps bytes that are not UTF-8 as src/platform/json/utf8.ts does, split anywhere', () => {
    const parts = [
      utf8('{"m": "ok '),
      Uint8Array.of(0xff, 0xc3, 0x28, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98),
      utf8(' end", "k": "\u00e9"}'),
    ];
    const bytes = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      bytes.set(p, at);
      at += p.length;
    }
    const expected = JSON.parse(decodeUtf8KeepingInvalid(bytes));
    for (let cut = 0; cut < bytes.length; cut++) {
      expect(parseChunked(bytes, [cut])).toEqual(expected);
    }
  });

  it('cuts a long string to maxString, and a long key too, without holding the rest', () => {
    const limits = { ...WIDE, maxString: 10 };
    const long = 'é'.repeat(5_000);
    const doc = JSON.stringify({ m: long, [`k${'y'.repeat(50)}`]: 1, e: '\\u00e9'.repeat(20) });
    const v = parseChunked(utf8(doc), [7, 100, 3_000], limits) as Record<string, unknown>;
    expect(v.m).toBe('é'.repeat(10));
    expect(v[`k${'y'.repeat(9)}`]).toBe(1);
    expect((v.e as string).length).toBe(10);
    // Cut where an escape or a UTF-8 sequence is in progress: never half a character.
    for (const s of ['a\\u00e9'.repeat(5), 'a😀'.repeat(10), 'ab\\n'.repeat(10)]) {
      const got = parseChunked(utf8(`"${s}"`), [], limits) as string;
      expect(JSON.parse(`"${s}"`).startsWith(got), s).toBe(true);
      expect(got.length).toBeGreaterThan(4);
    }
  });

  it('refuses a document whose text passes maxText, and one too deep or too wide', () => {
    const fail = (doc: string, limits: JsonStreamLimits) => {
      try {
        parseChunked(utf8(doc), [], limits);
      } catch (err) {
        return (err as JsonStreamError).reason;
      }
      return null;
    };
    const strings = JSON.stringify(Array.from({ length: 20 }, () => 'x'.repeat(100)));
    expect(fail(strings, { ...WIDE, maxText: 1_999 })).toBe('too_much_text');
    expect(fail(strings, { ...WIDE, maxText: 2_000 })).toBeNull();
    // A cut string counts what was decoded to cut it (its first 6 × 11 bytes here): what a
    // slice of it keeps alive.
    expect(fail(strings, { ...WIDE, maxString: 10, maxText: 20 * 66 - 1 })).toBe('too_much_text');
    expect(fail(strings, { ...WIDE, maxString: 10, maxText: 20 * 66 })).toBeNull();
    expect(fail('['.repeat(65) + ']'.repeat(65), WIDE)).toBe('too_deep');
    expect(fail('['.repeat(64) + ']'.repeat(64), WIDE)).toBeNull();
    expect(fail(JSON.stringify(Array(100).fill(0)), { ...WIDE, maxValues: 100 })).toBe('too_wide');
    expect(fail(JSON.stringify(Array(99).fill(0)), { ...WIDE, maxValues: 100 })).toBeNull();
    expect(fail('[1,', WIDE)).toBe('syntax');
    expect(() => parseChunked(utf8('{"a":'), [])).toThrow(JsonStreamError);
  });

  it('checks a skipped top-level value but never builds it', () => {
    const limits = { ...WIDE, skipTopLevel: ['files'], maxText: 100 };
    const doc = JSON.stringify({
      total_commits: 1,
      files: [{ patch: 'p'.repeat(10_000) }, { patch: 'q'.repeat(10_000) }],
      commits: ['abc'],
    });
    expect(parseChunked(utf8(doc), [10, 5_000], limits)).toEqual({
      total_commits: 1,
      commits: ['abc'],
    });
    const broken = '{"files": [{"patch": "\\x"}], "commits": []}';
    expect(() => parseChunked(utf8(broken), [], limits)).toThrow(JsonStreamError);
  });
});
