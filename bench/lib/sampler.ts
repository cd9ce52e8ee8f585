import { monitorEventLoopDelay } from 'node:perf_hooks';

/**
 * Preloaded into the soak's worker (`node --import bench/lib/sampler.ts bin/worker`): once
 * a second, one `process.sample` JSON line on stderr with RSS, heap and the event-loop
 * delay seen in that second. A preload keeps the worker's own code untouched, and the
 * timer is unref'd so it never keeps a stopping worker alive.
 */

const intervalMs = Number(process.env.SAMPLE_INTERVAL_MS ?? 1000);
const RESOLUTION_MS = 10;
const delay = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
delay.enable();

const lag = (ns: number) => Math.max(0, ns / 1e6 - RESOLUTION_MS);

setInterval(() => {
  const mem = process.memoryUsage();
  const line = {
    event: 'process.sample',
    at: Date.now(),
    rss: mem.rss,
    // The process's high-water mark (getrusage): a peak between two samples is not missed.
    maxRss: process.resourceUsage().maxRSS * 1024,
    heapTotal: mem.heapTotal,
    heapUsed: mem.heapUsed,
    external: mem.external,
    // The histogram records the time between its own timer's firings, in nanoseconds:
    // the timer's interval is taken off to leave the delay.
    lagP50Ms: lag(delay.percentile(50)),
    lagP99Ms: lag(delay.percentile(99)),
    lagMaxMs: lag(delay.max),
  };
  delay.reset();
  process.stderr.write(`${JSON.stringify(line)}\n`);
}, intervalMs).unref();
