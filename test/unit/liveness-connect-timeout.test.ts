import net from 'node:net';
import { afterEach, expect, it } from 'vitest';
import { JobLiveness, LIVENESS_CONNECT_TIMEOUT_MS } from '../../src/jobs/liveness.ts';
import { captureLogger } from '../recovery/helpers.ts';

/**
 * A liveness session whose server accepts the TCP connection and then never answers (a
 * wedged or half-dead database) must give up after its own connect timeout, not wait on the
 * OS: a job's hold() waits on that connect.
 */

const sockets = new Set<net.Socket>();
let server: net.Server | undefined;

afterEach(async () => {
  for (const s of sockets) s.destroy();
  await new Promise((r) => server?.close(r) ?? r(undefined));
  server = undefined;
});

it('gives up connecting to a server that never answers after its connect timeout', async () => {
  server = net.createServer((s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
  const { port } = server.address() as net.AddressInfo;

  const liveness = new JobLiveness(
    `postgres://postgres@127.0.0.1:${port}/postgres`,
    captureLogger().logger,
  );
  const began = Date.now();
  try {
    await expect(liveness.start()).rejects.toThrow(/timeout/i);
    const took = Date.now() - began;
    expect(took).toBeGreaterThanOrEqual(LIVENESS_CONNECT_TIMEOUT_MS - 100);
    expect(took).toBeLessThan(LIVENESS_CONNECT_TIMEOUT_MS + 3_000);
  } finally {
    await liveness.stop();
  }
}, 20_000);
