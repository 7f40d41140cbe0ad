#!/usr/bin/env bash
# The README's main job: runs the example streaming query on local files.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python examples/main_job.py "$@"
