#!/usr/bin/env bash
# Creates .venv (Python 3.11+) and installs the project with its test and Spark extras, once.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml scripts/bootstrap.sh | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    # compat: the checkout's root goes on sys.path through a .pth file, so pyspark_dstl is a
    # plain directory there; PySpark finds the "dstl-state" reader by listing the modules on
    # sys.path, which the default editable install (an import hook) does not show.
    .venv/bin/python -m pip install --quiet -e ".[test,bench]" \
        --config-settings editable_mode=compat
    rm -f .venv/.installed-* && touch "$stamp"
fi
