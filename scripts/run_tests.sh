#!/usr/bin/env bash
# The README's test command: lint, type-check, then the whole test suite (every tier).
# The fast tier alone, for the edit-test loop: .venv/bin/python -m pytest
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bash scripts/ensure_chromium.sh
.venv/bin/ruff check .
.venv/bin/mypy
# every tier (-m "" lifts the fast-tier default of pyproject.toml); the slowest tests listed
exec .venv/bin/python -m pytest -q -p no:cacheprovider -m "" --durations=15 "$@"
