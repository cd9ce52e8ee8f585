import { createApp } from '../app.ts';
import { fillGaps } from '../backfill/fill.ts';
import type { ChildMessage, ParentMessage } from '../backfill/fill-process.ts';

/**
 * The child process of fill-process.ts: one pass of gap fills for the worker's backfill
 * job, its results sent back over IPC. Never imported; forked.
 */

const stop = new AbortController();
const send = (m: ChildMessage) =>
  new Promise<void>((resolve) => process.send!(m, undefined, {}, () => resolve()));

const start = await new Promise<ParentMessage & { type: 'start' }>((resolve) => {
  process.on('message', (m: ParentMessage) => {
    if (m.type === 'start') resolve(m);
    else stop.abort();
  });
  // The worker is gone: stop after the chunk in flight, as a stopping worker would ask.
  process.on('disconnect', () => stop.abort());
});

try {
  const app = await createApp({
    role: 'backfill-fill',
    poolMax: 3,
    requires: 'schema',
    writesStoredData: true,
  });
  try {
    const results = await fillGaps(
      { ...app, logger: app.logger.child({ queue: 'backfill', job_id: start.pass.jobId }) },
      { signal: stop.signal, shouldStop: () => Date.now() >= start.pass.deadline },
    );
    if (process.connected) await send({ type: 'results', results });
  } finally {
    await app.close();
  }
} catch (err) {
  // An error, not a death: the worker's job fails with it (the gap keeps its backoff).
  const e = err as Error & { code?: string };
  if (process.connected) {
    await send({ type: 'failed', code: e?.code ?? null, message: e?.message ?? String(err) });
  }
  process.exitCode = 1;
} finally {
  process.disconnect?.();
}
