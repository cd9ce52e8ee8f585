// Loaded into a child with NODE_OPTIONS=--import: on exit it writes the process's peak
// resident set (getrusage maxRSS, bytes) to GPI_PEAK_RSS_FILE, so a test can bound the
// memory a real process used over its whole life, not only what a sampler happened to see.
import { writeFileSync } from 'node:fs';

const file = process.env.GPI_PEAK_RSS_FILE;
if (file) {
  process.on('exit', () => {
    writeFileSync(file, String(process.resourceUsage().maxRSS * 1024));
  });
}
