import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { classifyLine, mapArchivePush } from '../../src/backfill/events.ts';
import {
  JSON_LIMITS,
  type JsonLimits,
  jsonBytesExcess,
  jsonTextExcess,
  MAX_JSON_DEPTH,
} from '../../src/platform/json/bounded.ts';
import { JsonTooDeep, JsonTooWide, parseJson, TooDeepJson } from '../../src/platform/json/exact.ts';
import { decodeUtf8KeepingInvalid } from '../../src/platform/json/utf8.ts';
import { inspectJson } from '../../src/platform/json/walk.ts';

/**
 * Property tests of the bounded parser: over deep, wide, huge and
 * invalid-UTF-8 inputs, parseJson throws nothing but its own named errors (and SyntaxError
 * for text that is not JSON), never returns a value over its limits, and within the limits
 * accepts exactly what JSON.parse accepts, value for value.
 */

const SMALL: JsonLimits = { maxDepth: 6, maxValues: 40 };

/** Values in a parsed document, counted as the scan counts them (every scalar and container). */
function countValues(v: unknown): number {
  let n = 0;
  const stack = [v];
  while (stack.length > 0) {
    const x = stack.pop();
    n++;
    if (x !== null && typeof x === 'object' && !(x instanceof TooDeepJson)) {
      stack.push(...(Array.isArray(x) ? x : Object.values(x)));
    }
  }
  return n;
}

function outcome(f: () => unknown): { ok: unknown } | { err: unknown } {
  try {
    return { ok: f() };
  } catch (err) {
    return { err };
  }
}

const isOwnError = (err: unknown) =>
  err instanceof SyntaxError || err instanceof JsonTooDeep || err instanceof JsonTooWide;

/** Text near JSON: fragments that open, close, quote and escape, glued at random. */
const jsonish = fc
  .array(
    fc.oneof(
      fc.constantFrom('[', ']', '{', '}', ',', ':', '"', '\\', '\\"', '"a"', '1', 'null', ' '),
      fc.string({ maxLength: 4, unit: 'grapheme' }),
    ),
    { maxLength: 60 },
  )
  .map((parts) => parts.join(''));

const nested = fc
  .record({
    levels: fc.integer({ min: 1, max: 5_000 }),
    open: fc.constantFrom('[', '{"a":', '[{"k":"]\\"["},'),
    rootArray: fc.boolean(),
  })
  .map(({ levels, open, rootArray }) => {
    const close = open === '[' ? ']' : open === '{"a":' ? '}' : ']';
    const inner = `${open.repeat(levels)}1${close.repeat(levels)}`;
    // Containers on the deepest path: one per level, and the object beside the last one.
    const depth = open.length > 5 ? levels + 1 : levels;
    return { depth, text: rootArray ? `[1, ${inner}, "x"]` : inner };
  });

describe('jsonTextExcess measures what inspectJson would find, without building anything', () => {
  it('depth over the limit iff inspectJson finds it too deep', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 10 }), fc.integer({ min: 1, max: 8 }), (v, d) => {
        const text = JSON.stringify(v);
        const over = jsonTextExcess(text, { maxDepth: d, maxValues: 1e9 });
        expect(over?.reason === 'too_deep').toBe(inspectJson(v, d).tooDeep !== null);
      }),
      { numRuns: 500 },
    );
  });

  it('width over the limit iff the document holds more values than it', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 4 }), fc.integer({ min: 1, max: 60 }), (v, max) => {
        const over = jsonTextExcess(JSON.stringify(v), { maxDepth: 1e9, maxValues: max });
        expect(over?.reason === 'too_wide').toBe(countValues(v) > max);
      }),
      { numRuns: 500 },
    );
  });

  it('names the path of the first container over the depth limit, as inspectJson does', () => {
    const limits = { maxDepth: 3, maxValues: 1e9 };
    const cases: [string, string][] = [
      ['{"a":[1,{"b\\"":[[2]]}]}', 'a[1].b"'],
      ['[[], {"x": "[{", "y": [[[1]]]}]', '[1].y[0]'],
      ['[[[[]]]]', '[0][0][0]'],
    ];
    for (const [text, path] of cases) {
      expect(jsonTextExcess(text, limits)?.message).toBe(`${path} is nested deeper than 3 levels`);
      expect(jsonBytesExcess(Buffer.from(text), limits)?.message).toBe(
        `${path} is nested deeper than 3 levels`,
      );
      expect(inspectJson(JSON.parse(text), 3).tooDeep).toBe(path);
    }
  });

  it('bytes and text agree: the same limit is passed on a line before and after decoding', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          jsonish.map((s) => Buffer.from(s)),
          fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)),
        ),
        (bytes) => {
          const text = decodeUtf8KeepingInvalid(bytes);
          expect(jsonBytesExcess(bytes, SMALL)?.reason).toBe(jsonTextExcess(text, SMALL)?.reason);
        },
      ),
      { numRuns: 1000 },
    );
  });
});

describe('parseJson within and over its limits', () => {
  it('within the limits: exactly what JSON.parse gives (or its SyntaxError)', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.jsonValue({ maxDepth: 8 }).map((v) => JSON.stringify(v)),
          jsonish,
          fc.string({ unit: 'binary', maxLength: 40 }),
        ),
        (text) => {
          const limits = { maxDepth: 1e6, maxValues: 1e9 };
          const ours = outcome(() => parseJson(text, limits));
          const plain = outcome(() => JSON.parse(text));
          if ('err' in plain) {
            expect('err' in ours && ours.err instanceof SyntaxError).toBe(true);
          } else {
            expect('ok' in ours).toBe(true);
            // Through JSON.stringify: an exact integer (JSON.rawJSON) writes the same digits.
            expect(JSON.stringify((ours as { ok: unknown }).ok)).toBe(JSON.stringify(plain.ok));
          }
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('anything at all: only its own errors, and no value over the limits comes back', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          jsonish,
          nested.map((n) => n.text),
          fc.jsonValue({ maxDepth: 9 }).map((v) => JSON.stringify(v)),
          fc.uint8Array({ maxLength: 300 }).map((b) => decodeUtf8KeepingInvalid(b)),
        ),
        (text) => {
          const r = outcome(() => parseJson(text, SMALL));
          if ('err' in r) {
            expect(isOwnError(r.err)).toBe(true);
            return;
          }
          if (Array.isArray(r.ok)) {
            // An array may hold one more level; each element is within the limits or a marker.
            for (const el of r.ok) {
              if (el instanceof TooDeepJson) continue;
              expect(inspectJson(el, SMALL.maxDepth).tooDeep).toBeNull();
              expect(countValues(el)).toBeLessThanOrEqual(SMALL.maxValues);
            }
          } else {
            expect(inspectJson(r.ok, SMALL.maxDepth).tooDeep).toBeNull();
            expect(countValues(r.ok)).toBeLessThanOrEqual(SMALL.maxValues);
          }
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('deep documents: a marker in an array, JsonTooDeep otherwise, never a stack overflow', () => {
    fc.assert(
      fc.property(nested, ({ depth, text }) => {
        const r = outcome(() => parseJson(text));
        const over = depth > MAX_JSON_DEPTH;
        if (text.startsWith('[1, ')) {
          expect('ok' in r).toBe(true);
          const [, middle, last] = (r as { ok: unknown[] }).ok;
          expect(middle instanceof TooDeepJson).toBe(over);
          expect(last).toBe('x');
        } else if (text.startsWith('[')) {
          // A top-level array is a page: it may hold one level more, and what is over the
          // limits in it comes back as markers.
          expect('ok' in r && Array.isArray(r.ok)).toBe(true);
          const deepest = (r as { ok: unknown[] }).ok.at(-1);
          expect(deepest instanceof TooDeepJson).toBe(depth - 1 > MAX_JSON_DEPTH);
        } else if (over) {
          expect('err' in r && r.err instanceof JsonTooDeep).toBe(true);
        } else {
          expect('ok' in r).toBe(true);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('a 6 MB document nested 3,000,000 deep costs a scan: refused, nothing built', () => {
    const text = `${'['.repeat(3_000_000)}${']'.repeat(3_000_000)}`;
    const before = process.memoryUsage().heapUsed;
    expect(() => parseJson(`{"a":${text}}`)).toThrow(JsonTooDeep);
    const page = parseJson(`[{"id":"1"},${text},{"id":"2"}]`) as unknown[];
    expect(page[0]).toEqual({ id: '1' });
    expect(page[1]).toBeInstanceOf(TooDeepJson);
    expect((page[1] as TooDeepJson).reason).toBe('too_deep');
    expect(page[2]).toEqual({ id: '2' });
    // 3,000,000 arrays would be well over 100 MB of heap; the scan allocates nothing.
    expect(process.memoryUsage().heapUsed - before).toBeLessThan(64 * 1024 * 1024);
  });

  it('a wide document is refused by count, before it is built', () => {
    const wide = `[${Array(JSON_LIMITS.maxValues).fill('{}').join(',')}]`;
    expect(() => parseJson(`{"a":${wide}}`)).toThrow(JsonTooWide);
    const page = parseJson(`[${wide},{"id":"2"}]`) as unknown[];
    expect(page[0]).toBeInstanceOf(TooDeepJson);
    expect((page[0] as TooDeepJson).reason).toBe('too_wide');
    expect(page[1]).toEqual({ id: '2' });
  });

  it('a broken top-level array is a SyntaxError even when an element is over the limits', () => {
    const deep = `${'['.repeat(100)}${']'.repeat(100)}`;
    for (const text of [`[${deep},]`, `[${deep},,1]`, `[${deep}] x`, `[${deep}`, `[${deep},"a]`]) {
      expect(() => parseJson(text)).toThrow(SyntaxError);
    }
  });
});

/** Test-local inverse of decodeUtf8KeepingInvalid: U+DC80–U+DCFF back to their bytes. */
function encodeBack(text: string): Buffer {
  const parts: Buffer[] = [];
  let run = '';
  for (const ch of text) {
    const c = ch.charCodeAt(0);
    if (ch.length === 1 && c >= 0xdc80 && c <= 0xdcff) {
      parts.push(Buffer.from(run), Buffer.from([c - 0xdc00]));
      run = '';
    } else run += ch;
  }
  parts.push(Buffer.from(run));
  return Buffer.concat(parts);
}

describe('decodeUtf8KeepingInvalid: distinct bytes stay distinct text', () => {
  it('valid UTF-8 decodes as usual; any bytes round-trip (so no two inputs collapse)', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ unit: 'grapheme' }).map((s) => Buffer.from(s)),
          fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b)),
          fc
            .tuple(fc.string({ maxLength: 8 }), fc.uint8Array({ minLength: 1, maxLength: 4 }))
            .map(([s, b]) => Buffer.concat([Buffer.from(s), Buffer.from(b.map((x) => x | 0x80))])),
        ),
        (bytes) => {
          const text = decodeUtf8KeepingInvalid(bytes);
          if (new TextDecoder('utf-8').decode(bytes) === bytes.toString() && text.isWellFormed()) {
            expect(text).toBe(bytes.toString());
          }
          expect(encodeBack(text).equals(bytes)).toBe(true);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('two refs that differ only in invalid bytes decode to two different refs, both flagged', () => {
    const a = decodeUtf8KeepingInvalid(Buffer.from([0x6d, 0x61, 0xff, 0x69, 0x6e]));
    const b = decodeUtf8KeepingInvalid(Buffer.from([0x6d, 0x61, 0xfe, 0x69, 0x6e]));
    expect(a).not.toBe(b);
    expect(a.isWellFormed() || b.isWellFormed()).toBe(false);
  });
});

describe('classifyLine over hostile bytes', () => {
  it("mapArchivePush turns the parser's own verdicts into rejections, never an exception", () => {
    const deep = `{"id":"1","type":"PushEvent","payload":${'['.repeat(100)}${']'.repeat(100)}}`;
    expect(mapArchivePush({ id: '1', type: 'PushEvent' }, deep, 3)).toMatchObject({
      rejected: 'too_deep',
      eventId: '1',
    });
  });

  it('never throws; a push line over the limits or not JSON is rejected with a reason', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          jsonish.map((s) => `{"type":"PushEvent","id":"1",${s}}`),
          nested.map((n) => `{"type":"PushEvent","id":"1","payload":${n.text}}`),
          fc.uint8Array({ maxLength: 100 }).map((b) => `{"type":"PushEvent",${Buffer.from(b)}}`),
        ),
        (line) => {
          const v = classifyLine(Buffer.from(line));
          expect(['push', 'other', 'malformed', 'blank']).toContain(v.kind);
          if (v.kind === 'malformed') expect(v.reason).toMatch(/^[a-z_]{1,40}$/);
        },
      ),
      { numRuns: 1000 },
    );
  });
});
