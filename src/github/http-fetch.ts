import http from 'node:http';
import https from 'node:https';
import v8 from 'node:v8';
import vm from 'node:vm';
import { JsonStreamError, jsonStreamParser } from '../platform/json/stream.ts';
import { type AnswerLimits, byteSize } from './answer-limits.ts';

/**
 * A `fetch` for Octokit built on node:http, because the two timeouts we promise are
 * not expressible with the global fetch alone: connect (TCP) within connectTimeoutMs,
 * and the whole answer (headers and body) within responseTimeoutMs after that.
 * The body is read completely here, so a server that stalls mid-body is a timeout too.
 * Redirects (301/302/307/308) are followed for GET, up to 5; Response.url is the final URL.
 * A POST (GraphQL) sends its body and is never redirected.
 *
 * Keep-alive: a connection (TCP, and TLS against api.github.com) is reused for the next
 * request instead of being opened for every one. Idle sockets are dropped before the
 * server would drop them (the agent honours the server's `Keep-Alive: timeout` hint and
 * our own idle limit), and a request that fails with a reset before any answer on a REUSED
 * socket — the server closed it as we wrote — is sent once more on a fresh connection. A
 * server that closes idle sockets has not read it; one that read it and reset the connection
 * without answering sees it twice (a GET, or a GraphQL query, which is a read; an App's token
 * request then mints two tokens). The retry is the same request and ledger row: it is counted
 * once, and as sent even if the retry's own connect fails. A reset on a fresh connection is
 * the server's answer and is reported as before.
 *
 * A failure before the request could leave this machine — DNS, connection refused or timed
 * out, a TLS handshake that failed — carries `requestNotSent: true` (see isRequestNotSent):
 * GitHub never saw it, so the ledger does not count it against the budget.
 *
 * Bounded answers (ADR 0120): given AnswerLimits, a body longer than `maxBytes` — declared in
 * Content-Length, or counted as it streams in — is refused with AnswerTooLarge the moment the
 * cap is passed, and the socket is destroyed: not one byte more is read or kept.
 *
 * Streamed answers: a 2xx answer whose limits say `stream` is parsed chunk by chunk
 * as it arrives (src/platform/json/stream.ts) and no byte of it is kept; its Response has an empty body
 * and the parsed value (or why it is not JSON) is found with streamedBodyOf(response.body).
 * An answer holding more text than the limits keep is refused as too large, like one over its
 * byte cap. Any other body is kept once, as it came (no copy on its way to the reader).
 */
export class HttpTimeout extends Error {
  readonly code = 'ETIMEDOUT';
  constructor(phase: 'connect' | 'response', ms: number) {
    super(`${phase} timeout after ${ms} ms`);
    this.name = 'HttpTimeout';
  }
}

/** An answer whose body passed its kind's byte cap: refused while streaming, socket destroyed. */
export class AnswerTooLarge extends Error {
  readonly code = 'EANSWERTOOLARGE';
  readonly status: number;
  /** Bytes read when it was refused (0 when Content-Length alone said too much). */
  readonly received: number;
  readonly declared: number | null;
  readonly maxBytes: number;
  constructor(
    status: number,
    limits: AnswerLimits,
    received: number,
    declared: number | null,
    /** Refused for the text it holds (a streamed answer), not its bytes. */
    text: JsonStreamError | null = null,
  ) {
    super(
      text
        ? `HTTP ${status} answer holds more text than a ${limits.kind} answer may (${text.message}); read stopped at ${byteSize(received)}`
        : declared !== null && declared > limits.maxBytes
          ? `HTTP ${status} answer declares ${byteSize(declared)}, over the ${byteSize(limits.maxBytes)} cap for ${limits.kind} answers; not read`
          : `HTTP ${status} answer passed the ${byteSize(limits.maxBytes)} cap for ${limits.kind} answers; read stopped at ${byteSize(received)}`,
    );
    this.name = 'AnswerTooLarge';
    this.status = status;
    this.received = received;
    this.declared = declared;
    this.maxBytes = limits.maxBytes;
  }
}

/** Our fetch: the global fetch's signature, plus the limits its answer is read under. */
export type HttpFetch = (
  input: string | URL | Request,
  init?: RequestInit,
  limits?: AnswerLimits,
) => Promise<Response>;

export interface HttpFetchOptions {
  connectTimeoutMs: number;
  responseTimeoutMs: number;
  maxRedirects?: number;
  /** Connections kept to one host, in flight or idle (DEFAULT_MAX_SOCKETS when unset). */
  maxSockets?: number;
}

/** Idle keep-alive sockets are closed after this (GitHub keeps them far longer). */
const IDLE_SOCKET_MS = 4_000;
/**
 * Sockets to one host when the caller does not say (a lone request path: a probe, a test).
 * The GitHub client says: one a request gate (each credential's REST and GraphQL keys, an
 * App's token requests) and a few for redirects and overlap — a cap of 4 for a whole pool held
 * 16 credentials' polls to four requests in flight, 20 a second at GitHub's 200 ms an answer.
 */
const DEFAULT_MAX_SOCKETS = 4;

const STALE_SOCKET_ERRORS = new Set(['ECONNRESET', 'EPIPE']);

/** True for an error raised before any byte of the request could reach the server. */
export function isRequestNotSent(err: unknown): boolean {
  return (err as { requestNotSent?: unknown } | null)?.requestNotSent === true;
}

/**
 * How long before a server's announced keep-alive end (`Keep-Alive: timeout=N`) a socket is
 * no longer reused. Node's default, 1 s, makes every socket of a server that announces
 * `timeout=1` (Node's own servers with a short keepAliveTimeout do) single-use: a new TCP
 * connection for every request, on both ends (docs/performance.md, "Keep-alive"). A request
 * that meets a socket the server closed all the same is sent again (once()). Node < 24.7 has
 * no such option and keeps its fixed 1 s.
 */
const KEEP_ALIVE_END_MARGIN_MS = 250;

function keepAliveAgents(maxSockets: number) {
  const options = {
    keepAlive: true,
    maxSockets,
    maxFreeSockets: maxSockets,
    timeout: IDLE_SOCKET_MS,
    agentKeepAliveTimeoutBuffer: KEEP_ALIVE_END_MARGIN_MS,
  };
  return { 'http:': new http.Agent(options), 'https:': new https.Agent(options) };
}

type Agents = ReturnType<typeof keepAliveAgents>;

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const NULL_BODY = new Set([101, 204, 205, 304]);

/**
 * A streamed answer's chunks are garbage once parsed, but V8 frees memory outside its heap only
 * at a collection, and parsing allocates next to nothing on the heap, so none comes: up to V8's
 * margin for such memory (~64 MB) of dead chunks piled up over one 32 MB answer, 40 MB of RSS
 * over the worker's bound (bench `commits-memory`). A young-generation collection every few
 * MB read frees them (a millisecond or two each).
 */
const COLLECT_EVERY_BYTES = 4 * 1024 * 1024;
let collectYoung: (() => void) | null | undefined;

function collectReadChunks(): void {
  if (collectYoung === undefined) {
    try {
      // gc() is not given to code unless asked for; a context made after the flag has it.
      const given = (globalThis as { gc?: unknown }).gc;
      if (typeof given !== 'function') v8.setFlagsFromString('--expose-gc');
      const gc = (typeof given === 'function' ? given : vm.runInNewContext('gc')) as (o: {
        type: 'minor';
      }) => void;
      collectYoung = () => gc({ type: 'minor' });
    } catch {
      collectYoung = null;
    }
  }
  collectYoung?.();
}

/** A streamed answer, parsed as it came: its value, or why it is not JSON within the limits. */
export interface StreamedBody {
  /** Bytes read (0: the answer had no body). */
  bytes: number;
  value?: unknown;
  error?: JsonStreamError;
}

/** Streamed answers by their Response's body stream (what Octokit hands on as `data`). */
const streamedBodies = new WeakMap<object, StreamedBody>();

/** The parsed answer a streamed Response's body stands for, if it is one. */
export function streamedBodyOf(body: unknown): StreamedBody | undefined {
  return typeof body === 'object' && body !== null ? streamedBodies.get(body) : undefined;
}

interface RawAnswer {
  status: number;
  headers: Headers;
  /** The body as its chunks came (never joined here), or the streamed answer's parse. */
  chunks: Buffer[];
  streamed: StreamedBody | null;
}

/** What is sent: method, headers and (a POST's) body. */
interface Outgoing {
  method: string;
  headers: Record<string, string>;
  body: Buffer | null;
}

/**
 * One request; one whose reused socket turns out to be closed is sent once more, a POST too
 * (the file's header says when the server may have read it all the same).
 */
async function once(
  url: URL,
  out: Outgoing,
  o: HttpFetchOptions,
  agents: Agents,
  signal: AbortSignal | null | undefined,
  limits: AnswerLimits | undefined,
): Promise<RawAnswer> {
  try {
    return await attempt(url, out, o, agents, signal, limits);
  } catch (err) {
    const stale = (err as { staleSocket?: boolean }).staleSocket === true;
    if (!stale || signal?.aborted) throw err;
    try {
      return await attempt(url, out, o, agents, signal, limits, false);
    } catch (retryErr) {
      // The first attempt was written to a socket the server held: it may have reached it.
      if (isRequestNotSent(retryErr)) Object.assign(retryErr as object, { requestNotSent: false });
      throw retryErr;
    }
  }
}

function attempt(
  url: URL,
  { method, headers, body }: Outgoing,
  o: HttpFetchOptions,
  agents: Agents,
  signal: AbortSignal | null | undefined,
  limits: AnswerLimits | undefined,
  reuse = true,
): Promise<RawAnswer> {
  const lib = url.protocol === 'https:' ? https : http;
  const agent = reuse ? agents[url.protocol === 'https:' ? 'https:' : 'http:'] : false;
  return new Promise((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    let answered = false;
    // Connected: TCP for http, the TLS handshake done for https (only then can the request's
    // bytes leave); a reused keep-alive socket already is.
    let connected = false;
    const req = lib.request(url, { method, headers, agent });
    const notSentUnlessConnected = (err: Error) => {
      if (!connected) Object.assign(err, { requestNotSent: true });
      return err;
    };
    const fail = (err: Error) => {
      clearTimeout(timer);
      notSentUnlessConnected(err);
      req.destroy(err);
      reject(err);
    };
    const onAbort = () => fail(Object.assign(new Error('request aborted'), { name: 'AbortError' }));
    signal?.addEventListener('abort', onAbort, { once: true });
    // Time spent parsing a streamed answer as it arrives is ours, not the server's: the
    // response timeout is given it back (the transport's deadline still bounds the whole).
    let parseDebtMs = 0;
    const onResponseTimeout = () => {
      if (parseDebtMs > 0) {
        const debt = parseDebtMs;
        parseDebtMs = 0;
        timer = setTimeout(onResponseTimeout, debt);
        return;
      }
      fail(new HttpTimeout('response', o.responseTimeoutMs));
    };
    const startResponseTimer = () => {
      clearTimeout(timer);
      timer = setTimeout(onResponseTimeout, o.responseTimeoutMs);
    };
    req.on('socket', (socket) => {
      if (!socket.connecting) {
        connected = true;
        return startResponseTimer();
      }
      timer = setTimeout(
        () => fail(new HttpTimeout('connect', o.connectTimeoutMs)),
        o.connectTimeoutMs,
      );
      socket.once(url.protocol === 'https:' ? 'secureConnect' : 'connect', () => {
        connected = true;
        startResponseTimer();
      });
    });
    req.on('error', (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      notSentUnlessConnected(err);
      signal?.removeEventListener('abort', onAbort);
      if (req.reusedSocket && !answered && STALE_SOCKET_ERRORS.has(err.code ?? '')) {
        Object.assign(err, { staleSocket: true });
      }
      reject(err);
    });
    req.on('response', (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      const status = res.statusCode ?? 0;
      const declared = Number(res.headers['content-length']);
      if (limits && Number.isFinite(declared) && declared > limits.maxBytes) {
        return fail(new AnswerTooLarge(status, limits, 0, declared));
      }
      let received = 0;
      // A 2xx answer of a streamed kind: parsed chunk by chunk, none of it kept.
      const parser =
        limits?.stream && status >= 200 && status < 300 ? jsonStreamParser(limits.stream) : null;
      let parseError: JsonStreamError | null = null;
      let uncollected = 0;
      res.on('data', (c: Buffer) => {
        received += c.length;
        // Refused the moment the cap is passed: the socket goes, the chunks with it.
        if (limits && received > limits.maxBytes) {
          chunks.length = 0;
          return fail(new AnswerTooLarge(status, limits, received, null));
        }
        if (!parser) {
          chunks.push(c);
          return;
        }
        uncollected += c.length;
        if (uncollected >= COLLECT_EVERY_BYTES) {
          uncollected = 0;
          collectReadChunks();
        }
        if (parseError) return; // not JSON: read to its end (the socket stays usable), kept nowhere
        const started = performance.now();
        try {
          parser.write(c);
        } catch (err) {
          if (!(err instanceof JsonStreamError)) return fail(err as Error);
          if (err.reason === 'too_much_text') {
            return fail(new AnswerTooLarge(status, limits!, received, null, err));
          }
          parseError = err;
        } finally {
          parseDebtMs += performance.now() - started;
        }
      });
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
        let streamed: StreamedBody | null = null;
        if (parser) {
          streamed = { bytes: received };
          if (parseError) streamed.error = parseError;
          else if (received > 0) {
            try {
              streamed.value = parser.end();
            } catch (err) {
              if (!(err instanceof JsonStreamError)) return fail(err as Error);
              streamed.error = err;
            }
          }
        }
        resolve({ status: res.statusCode ?? 0, headers: h, chunks, streamed });
      });
    });
    req.end(body ?? undefined);
  });
}

/** The request body as bytes (Octokit hands a string; a stream is not something we send). */
async function outgoingBody(body: RequestInit['body']): Promise<Buffer | null> {
  if (body == null) return null;
  if (typeof body === 'string') return Buffer.from(body, 'utf8');
  if (body instanceof Uint8Array) return Buffer.from(body);
  return Buffer.from(await new Response(body).arrayBuffer());
}

/**
 * The chunks as a body stream, each handed on as it is (a Response made from bytes copies
 * them; this does not): the reader takes them in turn, and each is freed once read.
 */
function bodyStream(chunks: Buffer[]): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      const next = chunks.shift();
      if (next) controller.enqueue(next);
      else controller.close();
    },
  });
}

export function createHttpFetch(o: HttpFetchOptions): HttpFetch {
  const maxRedirects = o.maxRedirects ?? 5;
  const agents = keepAliveAgents(o.maxSockets ?? DEFAULT_MAX_SOCKETS);
  return async (input: string | URL | Request, init: RequestInit = {}, limits?: AnswerLimits) => {
    let url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
    const method = (init.method ?? 'GET').toUpperCase();
    const headers = Object.fromEntries(new Headers(init.headers).entries());
    const body = await outgoingBody(init.body);
    if (body) headers['content-length'] = String(body.length);
    for (let hop = 0; ; hop++) {
      const answer = await once(url, { method, headers, body }, o, agents, init.signal, limits);
      const location = answer.headers.get('location');
      if (REDIRECTS.has(answer.status) && location && method === 'GET' && hop < maxRedirects) {
        const next = new URL(location, url);
        // Never carry credentials to another host.
        if (next.host !== url.host) delete headers.authorization;
        url = next;
        continue;
      }
      const response = new Response(
        NULL_BODY.has(answer.status) ? null : bodyStream(answer.streamed ? [] : answer.chunks),
        {
          status: answer.status,
          headers: answer.headers,
        },
      );
      if (answer.streamed && response.body) streamedBodies.set(response.body, answer.streamed);
      Object.defineProperty(response, 'url', { value: url.toString() });
      return response;
    }
  };
}
