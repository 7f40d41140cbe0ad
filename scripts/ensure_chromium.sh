#!/usr/bin/env bash
# The report page's browser test needs Chromium (Debian's package). Installs it when it is
# missing and we are root (CI and the project's machines); otherwise only says so. Fast and
# idempotent when it is already there.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "ensure_chromium: chromium is missing and this is not root; the browser test will skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null
