#!/usr/bin/env sh
# Makes sure a headless-capable Chromium is at /usr/bin/chromium for the e2e status-page
# test (test/e2e/status-page.test.ts). CI calls this before `npm test`; locally it is a
# no-op when the browser is already there. Needs root (or passwordless sudo) to install.
set -eu

CHROMIUM="${CHROMIUM_PATH:-/usr/bin/chromium}"

if [ -x "$CHROMIUM" ]; then
  echo "ensure-chromium: $CHROMIUM present ($("$CHROMIUM" --version 2>/dev/null || echo 'version unknown'))"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO="sudo -n"
else
  echo "ensure-chromium: $CHROMIUM missing and no root to install it (apt-get install chromium)" >&2
  exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-chromium: $CHROMIUM missing and apt-get is not available on this system" >&2
  exit 1
fi

echo "ensure-chromium: installing Debian package chromium"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core

"$CHROMIUM" --version
