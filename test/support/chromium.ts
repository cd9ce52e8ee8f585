import { existsSync } from 'node:fs';

/**
 * Where the browser tests find Chromium: CHROMIUM_PATH, else Debian's /usr/bin/chromium.
 * A test never installs it (`npm test` changes nothing on the machine): without it the
 * browser tests are skipped with one line that says how to get it. `.ci/run` installs it
 * (scripts/ensure-chromium.sh), so CI always runs them.
 */
export const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';

/** null when Chromium is there; otherwise the one line a skipped browser test prints. */
export function chromiumMissing(what: string): string | null {
  if (existsSync(CHROMIUM)) return null;
  return (
    `SKIPPING ${what}: no Chromium at ${CHROMIUM}. Install it with ` +
    '`apt-get install chromium` (or scripts/ensure-chromium.sh), or set CHROMIUM_PATH.'
  );
}

/** The flags that keep headless Chromium off this machine's closed network. */
export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
