import { createHash } from 'node:crypto';
import type http from 'node:http';

/** The fake GitHub's answers and their shared shapes (GitHub's error JSON, ETags). */

export const DOCS = 'https://docs.github.com/rest';

export interface Answer {
  status: number;
  body?: string;
  headers?: Record<string, string>;
}

export const json = (
  status: number,
  value: unknown,
  headers: Record<string, string> = {},
): Answer => ({
  status,
  body: JSON.stringify(value),
  headers,
});

export const notFound = (): Answer =>
  json(404, { message: 'Not Found', documentation_url: DOCS, status: '404' });

export const movedPermanently = (location: string): Answer =>
  json(301, { message: 'Moved Permanently', url: location, documentation_url: DOCS }, { location });

export function bodyHash(s: string): string {
  return createHash('sha1').update(s).digest('hex');
}

/** A 200 with an ETag, or a 304 when the client already holds that ETag. */
export function conditional(
  req: http.IncomingMessage,
  value: unknown,
  headers: Record<string, string> = {},
  text?: string,
): Answer {
  const body = text ?? JSON.stringify(value);
  const etag = `W/"${bodyHash(body)}"`;
  if (req.headers['if-none-match'] === etag) return { status: 304, headers: { etag, ...headers } };
  return { status: 200, body, headers: { etag, ...headers } };
}

export function nextHour(): Date {
  return new Date(Math.ceil((Date.now() + 1) / 1000) * 1000 + 3600_000);
}

/** A 200 of `bytes` bytes, one events page holding one giant string, written as it is read. */
export async function streamHugeBody(
  res: http.ServerResponse,
  o: { bytes: number; declareLength?: boolean },
  headers: Record<string, string>,
  sent: (bytes: number) => void,
): Promise<void> {
  const head =
    '[{"id":"1","type":"PushEvent","actor":{"id":1,"login":"x"},"repo":{"id":1,"name":"x/y"},"payload":{"pad":"';
  const tail = '"}}]';
  const fill = Math.max(0, o.bytes - head.length - tail.length);
  res.writeHead(200, {
    'content-type': 'application/json; charset=utf-8',
    ...headers,
    ...(o.declareLength ? { 'content-length': String(head.length + fill + tail.length) } : {}),
  });
  let closed = false;
  res.once('close', () => {
    closed = true;
  });
  let total = 0;
  const write = async (chunk: string) => {
    if (closed) return;
    total += chunk.length;
    sent(total);
    if (res.write(chunk)) return;
    await new Promise<void>((r) => {
      const done = () => {
        res.off('drain', done);
        res.off('close', done);
        r();
      };
      res.once('drain', done);
      res.once('close', done);
    });
  };
  await write(head);
  const block = 'a'.repeat(64 * 1024);
  for (let left = fill; left > 0 && !closed; left -= block.length) {
    await write(left >= block.length ? block : block.slice(0, left));
  }
  await write(tail);
  if (!closed) res.end();
}
