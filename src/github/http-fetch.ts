import http from 'node:http';
import https from 'node:https';

/**
 * A `fetch` for Octokit built on node:http, because the two timeouts we promise are
 * not expressible with the global fetch alone: connect (TCP) within connectTimeoutMs,
 * and the whole answer (headers and body) within responseTimeoutMs after that.
 * The body is read completely here, so a server that stalls mid-body is a timeout too.
 * Redirects (301/302/307/308) are followed for GET, up to 5; Response.url is the final URL.
 * No keep-alive: requests are serialized by the gate anyway, and a reused socket the
 * server has just closed would turn into a spurious ECONNRESET that costs a reservation.
 */
export class HttpTimeout extends Error {
  readonly code = 'ETIMEDOUT';
  constructor(phase: 'connect' | 'response', ms: number) {
    super(`${phase} timeout after ${ms} ms`);
    this.name = 'HttpTimeout';
  }
}

export interface HttpFetchOptions {
  connectTimeoutMs: number;
  responseTimeoutMs: number;
  maxRedirects?: number;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const NULL_BODY = new Set([101, 204, 205, 304]);

interface RawAnswer {
  status: number;
  headers: Headers;
  body: Buffer;
}

function once(
  url: URL,
  method: string,
  headers: Record<string, string>,
  o: HttpFetchOptions,
  signal?: AbortSignal | null,
): Promise<RawAnswer> {
  const lib = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const req = lib.request(url, { method, headers, agent: false });
    const fail = (err: Error) => {
      clearTimeout(timer);
      req.destroy(err);
      reject(err);
    };
    const onAbort = () => fail(Object.assign(new Error('request aborted'), { name: 'AbortError' }));
    signal?.addEventListener('abort', onAbort, { once: true });
    const startResponseTimer = () => {
      clearTimeout(timer);
      timer = setTimeout(
        () => fail(new HttpTimeout('response', o.responseTimeoutMs)),
        o.responseTimeoutMs,
      );
    };
    req.on('socket', (socket) => {
      if (!socket.connecting) return startResponseTimer();
      timer = setTimeout(
        () => fail(new HttpTimeout('connect', o.connectTimeoutMs)),
        o.connectTimeoutMs,
      );
      socket.once('connect', startResponseTimer);
    });
    req.on('error', (err) => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      reject(err);
    });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', fail);
      res.on('aborted', () =>
        fail(Object.assign(new Error('response aborted'), { code: 'ECONNRESET' })),
      );
      res.on('end', () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) {
          if (v !== undefined) h.set(k, Array.isArray(v) ? v.join(', ') : v);
        }
        resolve({ status: res.statusCode ?? 0, headers: h, body: Buffer.concat(chunks) });
      });
    });
    req.end();
  });
}

export function createHttpFetch(o: HttpFetchOptions): typeof fetch {
  const maxRedirects = o.maxRedirects ?? 5;
  return (async (input: string | URL | Request, init: RequestInit = {}) => {
    let url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
    const method = (init.method ?? 'GET').toUpperCase();
    const headers = Object.fromEntries(new Headers(init.headers).entries());
    for (let hop = 0; ; hop++) {
      const answer = await once(url, method, headers, o, init.signal);
      const location = answer.headers.get('location');
      if (REDIRECTS.has(answer.status) && location && method === 'GET' && hop < maxRedirects) {
        const next = new URL(location, url);
        // Never carry credentials to another host.
        if (next.host !== url.host) delete headers.authorization;
        url = next;
        continue;
      }
      const response = new Response(
        NULL_BODY.has(answer.status) ? null : new Uint8Array(answer.body),
        {
          status: answer.status,
          headers: answer.headers,
        },
      );
      Object.defineProperty(response, 'url', { value: url.toString() });
      return response;
    }
  }) as typeof fetch;
}
