#!/usr/bin/env bash
# Installs Debian's chromium for the real-browser tests, once. Playwright drives it through
# executable_path; no browser is ever downloaded. Skips quietly when chromium is already there.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
echo "setup: installing Debian chromium for browser tests" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
