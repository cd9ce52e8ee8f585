import net from 'node:net';

/**
 * Tests never reach the internet: any TCP connect to a host that is not loopback
 * fails at once with NETWORK_REFUSED_IN_TESTS. Installed for every test file
 * (vitest setupFiles); test/unit/network-guard.test.ts proves it holds.
 */
const LOOPBACK = /^(localhost|127\.\d+\.\d+\.\d+|::1|\[::1\]|::ffff:127\.\d+\.\d+\.\d+)$/i;

export function isLoopbackHost(host: string | undefined): boolean {
  return host === undefined || host === '' || LOOPBACK.test(host);
}

const originalConnect = net.Socket.prototype.connect;
type ConnectArgs = Parameters<typeof originalConnect>;

function targetHost(args: unknown[]): { host?: string; path?: string } {
  const first = args[0] as unknown;
  if (Array.isArray(first)) return targetHost(first);
  if (first && typeof first === 'object') {
    const o = first as { host?: string; path?: string };
    return { host: o.host ?? (o.path ? undefined : 'localhost'), path: o.path };
  }
  if (typeof first === 'string' && Number.isNaN(Number(first))) return { path: first };
  return { host: typeof args[1] === 'string' ? args[1] : 'localhost' };
}

if (!(net.Socket.prototype.connect as { guarded?: boolean }).guarded) {
  const guarded = function (this: net.Socket, ...args: ConnectArgs) {
    const { host, path } = targetHost(args);
    if (!path && !isLoopbackHost(host)) {
      const err = Object.assign(
        new Error(
          `NETWORK_REFUSED_IN_TESTS: connection to ${host} refused; tests may only reach loopback`,
        ),
        {
          code: 'NETWORK_REFUSED_IN_TESTS',
        },
      );
      process.nextTick(() => this.destroy(err));
      return this;
    }
    return originalConnect.apply(this, args);
  } as typeof originalConnect & { guarded?: boolean };
  guarded.guarded = true;
  net.Socket.prototype.connect = guarded;
}
