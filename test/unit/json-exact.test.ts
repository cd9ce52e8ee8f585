import { describe, expect, it } from 'vitest';
import {
  compareIds,
  exactId,
  JsonTooDeep,
  parseJson,
  TooDeepJson,
  topLevelElements,
} from '../../src/platform/json/exact.ts';
import { inspectJson, storableCopy, storableText } from '../../src/platform/json/walk.ts';

const deep = (n: number) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`;

describe('parseJson: exact integers', () => {
  it.each([
    ['{"id":9999999999999999}', '9999999999999999'],
    ['[9007199254740993]', '9007199254740993'],
    ['{"a": [1, {"id" :  9223372036854775807}]}', '9223372036854775807'],
    ['9999999999999999', '9999999999999999'],
  ])('%s keeps every digit', (text, digits) => {
    const value = parseJson(text);
    const json = JSON.stringify(value);
    expect(json).toContain(digits);
  });

  it('leaves safe numbers, floats and strings alone', () => {
    expect(parseJson('{"a":1,"b":1.5,"c":"9999999999999999","d":1e13}')).toEqual({
      a: 1,
      b: 1.5,
      c: '9999999999999999',
      d: 1e13,
    });
  });

  it('exactId: canonical decimal strings within bigint, never a rounded number', () => {
    const v = (
      parseJson('[9999999999999999, 9223372036854775808, -1, 1.5, "007", "x"]') as unknown[]
    ).map(exactId);
    expect(v).toEqual(['9999999999999999', null, null, null, '7', null]);
    expect(exactId(583231)).toBe('583231');
    expect(compareIds('9', '10')).toBeLessThan(0);
    expect(compareIds('9999999999999999', '10000000000000000')).toBeLessThan(0);
  });

  it('throws SyntaxError for text that is not JSON (truncated)', () => {
    expect(() => parseJson('[{"id":"1","type":"PushEv')).toThrow(SyntaxError);
    expect(() => parseJson('[{"id":12345678901234567,"x":')).toThrow(SyntaxError);
  });
});

describe('parseJson: depth', () => {
  it('an array whose elements are too deep for the reviver: only those become markers', () => {
    const text = `[{"id":9999999999999999}, ${deep(20_000)}, "a]\\"[", 3]`;
    const [first, second, third, fourth] = parseJson(text) as unknown[];
    expect(JSON.stringify(first)).toBe('{"id":9999999999999999}');
    expect(second).toBeInstanceOf(TooDeepJson);
    expect((second as TooDeepJson).text.startsWith('{"a":{"a":')).toBe(true);
    expect(third).toBe('a]"[');
    expect(fourth).toBe(3);
  });

  it('any other document that deep is JsonTooDeep, never a stack overflow', () => {
    expect(() => parseJson(`{"id":9999999999999999,"x":${deep(20_000)}}`)).toThrow(JsonTooDeep);
    // Without a long number too: it is measured before anything is built (src/platform/json/bounded.ts).
    expect(() => parseJson(deep(20_000))).toThrow(JsonTooDeep);
  });

  it('topLevelElements splits on top-level commas only, strings and escapes respected', () => {
    expect(topLevelElements('[ 1 , "a,]" , {"b":[1,2]}, [ ], null,"\\\\" ]')).toEqual([
      '1',
      '"a,]"',
      '{"b":[1,2]}',
      '[ ]',
      'null',
      '"\\\\"',
    ]);
    expect(topLevelElements('[]')).toEqual([]);
  });
});

describe('walks: iterative, bounded', () => {
  it('inspectJson finds depth and unstorable text at any depth without recursion', () => {
    let v: unknown = 'ok\u0000';
    for (let i = 0; i < 1_000_000; i++) v = [v];
    const found = inspectJson(v, 64);
    expect(found.tooDeep).toMatch(/^(\[0\]){64}$/);
    const shallow = inspectJson({ a: { 'k\ud800': 1 }, b: 'x' }, 64);
    expect(shallow).toEqual({
      tooDeep: null,
      badText: { path: 'a.k\ud800', fault: 'lone_surrogate' },
    });
  });

  it('storableCopy: text repaired, depth cut, __proto__ kept as data, raw integers kept', () => {
    const input = parseJson(
      `{"a\\u0000":"x\\ud800","__proto__":{"p":1},"n":9999999999999999,"d":${deep(100)}}`,
      { maxDepth: 200, maxValues: 1000 },
    );
    const copy = storableCopy(input, 4) as Record<string, unknown>;
    const json = JSON.stringify(copy);
    expect(json).toContain('"a\ufffd":"x\ufffd"');
    expect(json).toContain('"__proto__":{"p":1}');
    expect(json).toContain('"n":9999999999999999');
    expect(json).toContain('"a":{"a":{"a":"[nested deeper than the limit; cut]"}}');
    expect(Object.getPrototypeOf(copy)).toBe(Object.prototype);
    expect(storableText('a\u0000\udc00')).toBe('a\ufffd\ufffd');
  });
});
