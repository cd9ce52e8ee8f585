/**
 * NDJSON framing over a byte stream with bounded memory: lines are cut on '\n' as Buffers
 * (no string is made of a line nobody parses), a trailing '\r' is dropped, and a line
 * longer than `maxLineBytes` is never buffered whole — it is reported as OVERSIZE and
 * skipped to its end. Lines come in batches (one per stream chunk) so a consumer pays one
 * await per chunk, not per line.
 */

/** Stands for a line that exceeded the cap (its bytes were dropped). */
export const OVERSIZE = Symbol('oversize line');
export type Line = Buffer | typeof OVERSIZE;

/** GitHub events are kilobytes; 8 MiB leaves room for the largest payloads ever archived. */
export const MAX_LINE_BYTES = 8 * 1024 * 1024;

const NL = 0x0a;
const CR = 0x0d;

function withoutCr(b: Buffer): Buffer {
  return b.length > 0 && b[b.length - 1] === CR ? b.subarray(0, b.length - 1) : b;
}

export async function* lineBatches(
  stream: AsyncIterable<Buffer | string>,
  maxLineBytes = MAX_LINE_BYTES,
): AsyncGenerator<Line[]> {
  let parts: Buffer[] = [];
  let partBytes = 0;
  let oversize = false;
  for await (const raw of stream) {
    const chunk = typeof raw === 'string' ? Buffer.from(raw) : raw;
    const batch: Line[] = [];
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(NL, start);
      if (nl === -1) {
        const rest = chunk.subarray(start);
        if (!oversize && partBytes + rest.length > maxLineBytes) {
          oversize = true;
          parts = [];
          partBytes = 0;
        } else if (!oversize && rest.length > 0) {
          parts.push(rest);
          partBytes += rest.length;
        }
        break;
      }
      const piece = chunk.subarray(start, nl);
      if (oversize || partBytes + piece.length > maxLineBytes) {
        batch.push(OVERSIZE);
        oversize = false;
      } else if (parts.length > 0) {
        parts.push(piece);
        batch.push(withoutCr(Buffer.concat(parts, partBytes + piece.length)));
      } else {
        batch.push(withoutCr(piece));
      }
      parts = [];
      partBytes = 0;
      start = nl + 1;
    }
    if (batch.length > 0) yield batch;
  }
  // The last line may have no newline. (A stream that failed never gets here: its partial
  // last line is dropped, not read as a malformed event.)
  if (oversize) yield [OVERSIZE];
  else if (partBytes > 0) yield [withoutCr(Buffer.concat(parts, partBytes))];
}
