import net from 'node:net';
import { describe, expect, it } from 'vitest';

describe('network guard', () => {
  it('refuses a TCP connection to a non-loopback host', async () => {
    const err = await new Promise<Error & { code?: string }>((resolve) => {
      const s = net.connect({ host: '140.82.112.6', port: 443 });
      s.once('error', resolve);
      s.once('connect', () =>
        resolve(Object.assign(new Error('connected'), { code: 'CONNECTED' })),
      );
    });
    expect(err.code).toBe('NETWORK_REFUSED_IN_TESTS');
  });

  it('refuses fetch to api.github.com before any DNS or socket', async () => {
    const err = await fetch('https://api.github.com/events').then(
      () => null,
      (e: Error & { cause?: { code?: string } }) => e,
    );
    expect(err?.cause?.code).toBe('NETWORK_REFUSED_IN_TESTS');
  });

  it('lets loopback through', async () => {
    const server = net.createServer((s) => s.end('hi'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as net.AddressInfo;
    const got = await new Promise<string>((resolve, reject) => {
      const s = net.connect({ host: '127.0.0.1', port });
      s.once('data', (d) => resolve(d.toString()));
      s.once('error', reject);
    });
    server.close();
    expect(got).toBe('hi');
  });
});
