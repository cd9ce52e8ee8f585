import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { type Line, lineBatches, OVERSIZE } from '../../src/backfill/lines.ts';

async function lines(chunks: (string | Buffer)[], max?: number): Promise<(string | symbol)[]> {
  const out: Line[] = [];
  for await (const batch of lineBatches(Readable.from(chunks.map((c) => Buffer.from(c))), max)) {
    out.push(...batch);
  }
  return out.map((l) => (l === OVERSIZE ? l : l.toString()));
}

describe('NDJSON lines', () => {
  it('cuts on newlines across chunk boundaries, dropping CR and keeping empty lines', async () => {
    expect(await lines(['{"a":1}\n{"b"', ':2}\r\n\n{"c":', '3}'])).toEqual([
      '{"a":1}',
      '{"b":2}',
      '',
      '{"c":3}',
    ]);
  });

  it('keeps multi-byte characters split across chunks intact', async () => {
    const text = Buffer.from('{"m":"héllo ✓"}\n');
    expect(await lines([text.subarray(0, 9), text.subarray(9, 15), text.subarray(15)])).toEqual([
      '{"m":"héllo ✓"}',
    ]);
  });

  it('reports a line over the cap as OVERSIZE without holding it, and goes on', async () => {
    const big = 'x'.repeat(50);
    expect(await lines([`ok\n${big.slice(0, 20)}`, big.slice(20), '\nnext\n'], 30)).toEqual([
      'ok',
      OVERSIZE,
      'next',
    ]);
    expect(await lines([`${big}`], 30)).toEqual([OVERSIZE]);
  });

  it('yields nothing for an empty stream', async () => {
    expect(await lines([])).toEqual([]);
  });
});
