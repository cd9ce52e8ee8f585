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
