import { isUtf8 } from 'node:buffer';

/**
 * Bytes from outside → text, without losing which bytes were not UTF-8. A lossy decoder
 * turns every invalid sequence into U+FFFD, so two refs that differ only in their invalid
 * bytes become the same ref (the red team stored 1 of 2 such pushes). Here each byte that
 * does not begin a valid UTF-8 sequence becomes a lone low surrogate U+DC80–U+DCFF (the
 * "surrogateescape" of Python): distinct bytes stay distinct, and the existing rules see
 * it — a key field holding a lone surrogate is rejected (rules.ts keyText), free text is
 * made storable and logged (walk.ts storableText). Valid UTF-8 decodes exactly as usual.
 */

const CHUNK_UNITS = 8192;

/** Length of the valid UTF-8 sequence starting at i (Unicode table 3-7), or 0. */
function sequenceLength(b: Uint8Array, i: number): number {
  const c = b[i]!;
  if (c < 0x80) return 1;
  const tail = (k: number, lo = 0x80, hi = 0xbf) => {
    const v = b[i + k];
    return v !== undefined && v >= lo && v <= hi;
  };
  if (c >= 0xc2 && c <= 0xdf) return tail(1) ? 2 : 0;
  if (c === 0xe0) return tail(1, 0xa0) && tail(2) ? 3 : 0;
  if (c === 0xed) return tail(1, 0x80, 0x9f) && tail(2) ? 3 : 0;
  if (c >= 0xe1 && c <= 0xef) return tail(1) && tail(2) ? 3 : 0;
  if (c === 0xf0) return tail(1, 0x90) && tail(2) && tail(3) ? 4 : 0;
  if (c >= 0xf1 && c <= 0xf3) return tail(1) && tail(2) && tail(3) ? 4 : 0;
  if (c === 0xf4) return tail(1, 0x80, 0x8f) && tail(2) && tail(3) ? 4 : 0;
  return 0;
}

/** The text of `bytes`; invalid bytes become U+DC80 + byte − 0x80 (see above). */
export function decodeUtf8KeepingInvalid(bytes: Uint8Array): string {
  if (isUtf8(bytes)) return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString();
  // At most one UTF-16 unit per byte (a 4-byte sequence is 2 units).
  const units = new Uint16Array(bytes.length);
  let n = 0;
  for (let i = 0; i < bytes.length; ) {
    const len = sequenceLength(bytes, i);
    const c = bytes[i]!;
    if (len === 0) {
      units[n++] = 0xdc00 + c;
      i++;
    } else if (len === 1) {
      units[n++] = c;
      i++;
    } else if (len === 2) {
      units[n++] = ((c & 0x1f) << 6) | (bytes[i + 1]! & 0x3f);
      i += 2;
    } else if (len === 3) {
      units[n++] = ((c & 0x0f) << 12) | ((bytes[i + 1]! & 0x3f) << 6) | (bytes[i + 2]! & 0x3f);
      i += 3;
    } else {
      const cp =
        ((c & 0x07) << 18) |
        ((bytes[i + 1]! & 0x3f) << 12) |
        ((bytes[i + 2]! & 0x3f) << 6) |
        (bytes[i + 3]! & 0x3f);
      units[n++] = 0xd800 + ((cp - 0x10000) >> 10);
      units[n++] = 0xdc00 + ((cp - 0x10000) & 0x3ff);
      i += 4;
    }
  }
  const parts: string[] = [];
  for (let at = 0; at < n; at += CHUNK_UNITS) {
    parts.push(String.fromCharCode(...units.subarray(at, Math.min(n, at + CHUNK_UNITS))));
  }
  return parts.join('');
}
