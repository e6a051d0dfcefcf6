#!/usr/bin/env bash
# Install Debian's Chromium for the browser tests (tests/web), if missing. Playwright drives
# it through executable_path: no browser is ever downloaded.
set -euo pipefail

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if [ ! -x /usr/bin/chromium ]; then
  echo "ci: installing Chromium from Debian's packages" >&2
  as_root apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
fi
/usr/bin/chromium --version >&2
