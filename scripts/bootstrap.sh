#!/usr/bin/env bash
# Creates .venv (Python 3.11+) and installs the project with its test and Spark extras, once.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# strict editable installs link each module file, so a new module needs a reinstall: the
# stamp covers the list of the package's files as well
stamp=.venv/.installed-$( (cat pyproject.toml scripts/bootstrap.sh; \
    find pyspark_dstl/ core changelog materializer backend spark data_sources -name '*.py' | sort) \
    | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    # strict: a tree of links holding only the pyspark_dstl package goes on sys.path through
    # a .pth file. PySpark finds the "dstl-state" reader by listing the modules on sys.path,
    # which the default editable install (an import hook) does not show, and the checkout's
    # root itself must not go there (it would make changelog, backend, ... importable).
    .venv/bin/python -m pip install --quiet -e ".[test,bench]" \
        --config-settings editable_mode=strict
    rm -f .venv/.installed-* && touch "$stamp"
fi
