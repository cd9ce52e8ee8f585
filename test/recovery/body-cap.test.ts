import { readFileSync } from 'node:fs';
import http from 'node:http';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_BODY_BUDGET_BYTES } from '../../src/web/body-budget.ts';
import { useTestDatabase } from '../support/db.ts';
import { waitFor } from '../support/wait.ts';
import { type Child, killAll, spawnBin } from './world.ts';

/**
 * Bounded intake: forty concurrent 24 MB bodies (each under GitHub's 25 MB
 * limit, none correctly signed) at the real bin/web. Before the body cap they took the
 * process to 1.1 GB RSS and it stayed there. Now bytes buffered at once across all
 * requests are capped (64 MB, charged as they arrive): the requests past the cap are answered 503 with
 * Retry-After, the rest 401, none reset or 5xx otherwise; the process's RSS stays within a
 * few hundred MB during the burst, comes back down after it, and a second burst does not
 * add to it. The RSS figures are printed (memory bounds, not timed assertions: the waits
 * for RSS to fall are bounded only so a regression fails instead of hanging).
 */

const t = useTestDatabase();
const children: Child[] = [];
afterAll(() => killAll(children));

const BODY = Buffer.alloc(24 * 1024 * 1024, 0x61);
const CONCURRENT = 40;
/** Well above a Node process with a 64 MB body cap, far below the 1.1 GB it reached. */
const PEAK_BOUND = 400 * 1024 * 1024;

function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m?.[1] ?? 0) * 1024;
}

/** POSTs the body in 1 MB writes; resolves with the status (or 'reset' if none came). */
function post(url: string, id: string): Promise<number | 'reset'> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const req = http.request({
      host: hostname,
      port,
      method: 'POST',
      path: '/webhooks/github',
      headers: {
        'content-type': 'application/json',
        'content-length': String(BODY.length),
        'x-github-event': 'push',
        'x-github-delivery': `burst-${id}`,
        'x-hub-signature-256': `sha256=${'0'.repeat(64)}`,
      },
    });
    let answered = false;
    req.on('response', (res) => {
      answered = true;
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    });
    req.on('error', () => {
      if (!answered) resolve('reset');
    });
    const CHUNK = 1024 * 1024;
    const write = (offset: number) => {
      if (req.destroyed || answered) return;
      if (offset >= BODY.length) return void req.end();
      req.write(BODY.subarray(offset, offset + CHUNK), () => write(offset + CHUNK));
    };
    write(0);
  });
}

const MB = 1024 * 1024;
const mb = (b: number) => `${(b / MB).toFixed(0)} MB`;

/** One burst: every request's answer, and the highest RSS seen while it ran. */
async function burst(url: string, pid: number, tag: string) {
  let peak = rssBytes(pid);
  const sampler = setInterval(() => {
    peak = Math.max(peak, rssBytes(pid));
  }, 20);
  const statuses = await Promise.all(
    Array.from({ length: CONCURRENT }, (_, i) => post(url, `${tag}-${i}`)),
  );
  clearInterval(sampler);
  const counts: Record<string, number> = {};
  for (const s of statuses) counts[String(s)] = (counts[String(s)] ?? 0) + 1;
  return { counts, peak: Math.max(peak, rssBytes(pid)) };
}

/**
 * A full garbage collection in the web process, asked over its inspector (the Chrome
 * DevTools protocol). What RSS keeps after a burst is then what the process really
 * retains: without it the figure depends on whether V8 happened to collect the burst's
 * last socket buffers, which an idle process may not do for minutes (measured: 223 MB for
 * 30 s with no request; a 201 MB vs 200 MB bound missed by 1 MB in the suite).
 */
async function collectGarbage(inspectorUrl: string): Promise<void> {
  const ws = new WebSocket(inspectorUrl);
  await new Promise<void>((resolve, reject) => {
    ws.onopen = () => resolve();
    ws.onerror = () => reject(new Error(`inspector ${inspectorUrl} did not answer`));
  });
  try {
    await new Promise<void>((resolve, reject) => {
      ws.onmessage = (m) => {
        const reply = JSON.parse(String(m.data)) as { id?: number; error?: unknown };
        if (reply.id !== 1) return;
        if (reply.error) reject(new Error(JSON.stringify(reply.error)));
        else resolve();
      };
      ws.send(JSON.stringify({ id: 1, method: 'HeapProfiler.collectGarbage' }));
    });
  } finally {
    ws.close();
  }
}

/**
 * Collects garbage, then waits (bounded) for RSS to fall below `below`; returns the
 * lowest RSS seen, which the caller asserts on (so a failure prints the figure instead of
 * a timeout).
 */
async function settle(pid: number, below: number, inspectorUrl: string): Promise<number> {
  await collectGarbage(inspectorUrl);
  let lowest = rssBytes(pid);
  await waitFor(
    () => {
      lowest = Math.min(lowest, rssBytes(pid));
      return lowest < below ? lowest : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 250, what: 'RSS to fall' },
  ).catch(() => {});
  return lowest;
}

describe('body cap', () => {
  it('40 concurrent 24 MB bodies, twice: 401, 503 or 408 each, RSS bounded, back down, not growing', {
    timeout: 180_000,
  }, async () => {
    const web = spawnBin('web', {
      DATABASE_URL: t.url,
      WEBHOOK_SECRET: 'burst-secret',
      HTTP_PORT: '0',
      GITHUB_MODE: 'fixture',
      // The inspector on a free port, only so the test can ask for a full collection.
      NODE_OPTIONS: '--inspect=127.0.0.1:0',
    });
    children.push(web);
    const url = String(
      (await web.waitForLine((l) => l.event === 'web.listening', 'listening')).url,
    );
    // The last one: bin/* re-execute themselves once (memory defaults), and each image
    // opens an inspector; only the second lives.
    const listening = web.lines.filter((l) => /Debugger listening on ws:/.test(String(l.msg)));
    const inspectorUrl = /ws:\/\/\S+/.exec(String(listening.at(-1)?.msg))![0];
    const pid = web.process.pid!;
    const baseline = rssBytes(pid);

    const first = await burst(url, pid, 'a');
    const after1 = await settle(pid, first.peak - 8 * MB, inspectorUrl);
    const second = await burst(url, pid, 'b');
    const after2 = await settle(pid, after1 + 64 * MB, inspectorUrl);
    console.log(
      `body cap ${mb(DEFAULT_BODY_BUDGET_BYTES)}: ${CONCURRENT} × ${mb(BODY.length)} bodies, twice → ` +
        `${JSON.stringify(first.counts)} then ${JSON.stringify(second.counts)}; RSS baseline ${mb(baseline)}, ` +
        `peak ${mb(first.peak)} → ${mb(after1)}, peak ${mb(second.peak)} → ${mb(after2)}`,
    );

    for (const { counts } of [first, second]) {
      // Every request got an answer — never a reset, never a 500 for load: 503 past the cap.
      // The budget is charged by bytes received (ADR 0124), so many bodies are read at once
      // and, on a loaded machine, one may not finish within the body timeout: 408, an answer.
      for (const s of Object.keys(counts)) expect(['401', '503', '408']).toContain(s);
      expect(counts['401']).toBeGreaterThan(0);
      expect(counts['503']).toBeGreaterThan(0);
    }
    const busy = web.lines.filter((l) => l.event === 'webhook.rejected' && l.status === 503);
    expect(busy.length).toBe((first.counts['503'] ?? 0) + (second.counts['503'] ?? 0));
    expect(Math.max(first.peak, second.peak)).toBeLessThan(PEAK_BOUND);
    // Back down after the burst, and a second burst reuses what the first left, not more.
    expect(after1).toBeLessThan(first.peak - 8 * MB);
    expect(after2).toBeLessThan(after1 + 64 * MB);
    // Still serving.
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
  });
});
