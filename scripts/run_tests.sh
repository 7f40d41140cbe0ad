#!/usr/bin/env bash
# The README's test command: lint, type-check, then the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bash scripts/ensure_chromium.sh
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
