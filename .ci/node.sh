#!/usr/bin/env bash
# Install Node.js (Debian's, if the image has none) and the pinned chat-protocol clients
# (tests/node/package-lock.json: the AI SDK and AG-UI's client) that tests/protocols drives.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "ci: installing Node.js from Debian's packages" >&2
  as_root apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >&2
fi
node --version >&2
npm ci --prefix tests/node --no-audit --no-fund --loglevel=error >&2
