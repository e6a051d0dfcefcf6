#!/usr/bin/env bash
# Install curl (Debian's, if the image has none): tests/docs/test_readme.py runs the
# README's walkthrough, whose commands are curl calls, as a reader's shell would.
set -euo pipefail

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v curl >/dev/null; then
  echo "ci: installing curl from Debian's packages" >&2
  as_root apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >&2
fi
curl --version | head -1 >&2
