import http from 'node:http';
import { sql } from 'kysely';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  DEFAULT_BODY_BUDGET_BYTES,
  DEFAULT_BODY_RESERVE_BYTES,
} from '../../src/web/body-budget.ts';
import { useTestDatabase } from '../support/db.ts';
import { waitFor } from '../support/wait.ts';
import { deliver, pushPayload, TEST_WEBHOOK_SECRET } from '../support/web.ts';
import { type Child, killAll, spawnBin } from './world.ts';

/**
 * The red team's attack retried against the real bin/web: strangers' open
 * connections must not cost a signed delivery its answer. Before, the body budget (64 MiB)
 * was charged with the declared Content-Length before a byte arrived and before any
 * signature: three header-only connections declaring 25 + 25 + 14 MiB made 37 of 38 signed
 * deliveries answer 503, and GitHub does not redeliver on its own.
 *
 * Every wait is on a signal (an answer, a gauge on /metrics), never a sleep.
 */

const MiB = 1024 * 1024;
const ATTACK = [25 * MiB, 25 * MiB, 14 * MiB];
const DELIVERIES = 38;

const t = useTestDatabase();
const children: Child[] = [];
let web: Child;
let url: string;

beforeAll(async () => {
  web = spawnBin('web', {
    DATABASE_URL: t.url,
    WEBHOOK_SECRET: TEST_WEBHOOK_SECRET,
    HTTP_PORT: '0',
    GITHUB_MODE: 'fixture',
  });
  children.push(web);
  url = String((await web.waitForLine((l) => l.event === 'web.listening', 'listening')).url);
}, 180_000);
afterAll(() => killAll(children));
beforeEach(async () => {
  await sql`TRUNCATE push_events, webhook_deliveries, actors, repositories`.execute(t.db);
});

/** A stranger's connection: headers sent, then `send` bytes of its body, then held open. */
interface Held {
  /** The server's answer, if it gave one (a refusal); never resolves while it reads on. */
  answered: Promise<number>;
  status: number | null;
  close(): void;
}

function holdOpen(headers: Record<string, string>, declared: number, send = 0): Held {
  const { hostname, port } = new URL(url);
  const req = http.request({
    host: hostname,
    port,
    method: 'POST',
    path: '/webhooks/github',
    headers: {
      'content-type': 'application/json',
      'content-length': String(declared),
      'x-github-event': 'push',
      'x-github-delivery': `stranger-${crypto.randomUUID()}`,
      ...headers,
    },
  });
  const held: Held = {
    status: null,
    answered: new Promise((resolve) => {
      req.on('response', (res) => {
        held.status = res.statusCode!;
        res.resume();
        resolve(res.statusCode!);
      });
    }),
    close: () => req.destroy(),
  };
  req.on('error', () => {}); // the server may cut a refused one; that is its right
  if (send === 0) req.flushHeaders();
  else {
    const chunk = Buffer.alloc(MiB, 0x61);
    const write = (sent: number) => {
      if (req.destroyed || held.status !== null || sent >= send) return;
      const n = Math.min(MiB, send - sent);
      req.write(chunk.subarray(0, n), () => write(sent + n));
    };
    write(0);
  }
  return held;
}

/** A fake signature with the right shape: the body must be read before it is found wrong. */
const FAKE_SIGNATURE = { 'x-hub-signature-256': `sha256=${'0'.repeat(64)}` };

async function gauge(name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  return Number(m?.[1] ?? Number.NaN);
}

/** 38 signed push deliveries at once, as GitHub would send them; their statuses. */
async function signedBurst(): Promise<number[]> {
  const answers = await Promise.all(
    Array.from({ length: DELIVERIES }, () => deliver(url, { body: JSON.stringify(pushPayload()) })),
  );
  return answers.map((a) => a.status);
}

async function pushesStored(): Promise<number> {
  const r = await sql<{ n: string }>`SELECT count(*) AS n FROM push_events`.execute(t.db);
  return Number(r.rows[0]!.n);
}

describe('webhook body budget under attack', () => {
  it('three header-only connections declaring 25 + 25 + 14 MiB, held open: 38 signed deliveries all 202', {
    timeout: 180_000,
  }, async () => {
    const strangers = ATTACK.map((n) => holdOpen(FAKE_SIGNATURE, n));
    try {
      // The server has read their headers and is waiting for their bodies.
      await waitFor(async () => (await gauge('gpi_webhook_bodies_reading')) === 3, {
        what: 'three bodies being read',
        intervalMs: 100,
      });
      // Declared, not received: they hold nothing.
      expect(await gauge('gpi_webhook_body_bytes_buffered')).toBe(0);
      const statuses = await signedBurst();
      expect(statuses).toEqual(Array(DELIVERIES).fill(202));
      expect(await pushesStored()).toBe(DELIVERIES);
      // Still held open, unanswered: nothing was refused for their sake or because of them.
      expect(strangers.map((s) => s.status)).toEqual([null, null, null]);
      expect(await gauge('gpi_webhook_busy_total')).toBe(0);
    } finally {
      for (const s of strangers) s.close();
    }
  });

  it('the same strangers sending their bodies: the reserve keeps 38 signed deliveries readable', {
    timeout: 120_000,
  }, async () => {
    const busyBefore = await gauge('gpi_webhook_busy_total');
    const largeCap = DEFAULT_BODY_BUDGET_BYTES - DEFAULT_BODY_RESERVE_BYTES;
    // One after the other, each sends all of its body but the last byte, then waits:
    // together 64 MiB, the whole budget. Bodies over 1 MiB may use only the budget less
    // the reserve, so the third is refused and the reserve stays free for small ones.
    const strangers: Held[] = [];
    try {
      let expected = 0;
      for (const n of ATTACK.slice(0, 2)) {
        strangers.push(holdOpen(FAKE_SIGNATURE, n, n - 1));
        expected += n;
        await waitFor(async () => (await gauge('gpi_webhook_body_bytes_buffered')) === expected, {
          what: `${expected / MiB} MiB held`,
          timeoutMs: 60_000,
          intervalMs: 100,
        });
      }
      const third = holdOpen(FAKE_SIGNATURE, ATTACK[2]!, ATTACK[2]! - 1);
      strangers.push(third);
      expect(await third.answered).toBe(503);
      expect(await gauge('gpi_webhook_body_bytes_buffered')).toBe(expected);
      expect(expected).toBeLessThanOrEqual(largeCap);
      expect(await gauge('gpi_webhook_busy_total')).toBe(busyBefore + 1);

      const statuses = await signedBurst();
      expect(statuses).toEqual(Array(DELIVERIES).fill(202));
      expect(await pushesStored()).toBe(DELIVERIES);
      // The first two are still being read, unanswered.
      expect(strangers.slice(0, 2).map((s) => s.status)).toEqual([null, null]);
    } finally {
      for (const s of strangers) s.close();
    }
  });

  it('a request without X-Hub-Signature-256 is refused before a byte of its body is read', {
    timeout: 180_000,
  }, async () => {
    // It declares 25 MiB and sends none of it: the answer comes anyway, at once.
    const unsigned = holdOpen({}, 25 * MiB);
    const malformed = holdOpen({ 'x-hub-signature-256': 'sha1=abc' }, 25 * MiB);
    try {
      expect(await unsigned.answered).toBe(401);
      expect(await malformed.answered).toBe(401);
      expect(await gauge('gpi_webhook_body_bytes_buffered')).toBe(0);
      const rejected = web.lines.filter(
        (l) =>
          l.event === 'webhook.rejected' &&
          l.status === 401 &&
          /body not read/.test(String(l.reason)),
      );
      expect(rejected.map((l) => l.reason).sort()).toEqual([
        'bad signature (body not read)',
        'missing signature (body not read)',
      ]);
    } finally {
      unsigned.close();
      malformed.close();
    }
    // A signed delivery beside them is read and stored.
    expect((await deliver(url, { body: JSON.stringify(pushPayload()) })).status).toBe(202);
  });
});
