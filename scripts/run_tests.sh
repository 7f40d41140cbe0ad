#!/usr/bin/env bash
# The README's test command: lint, type-check, then the whole test suite (every tier).
# The fast tier alone, for the edit-test loop: .venv/bin/python -m pytest
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bash scripts/ensure_chromium.sh
.venv/bin/ruff check .
.venv/bin/mypy
# the tests' JVMs map Spark's classes from one archive (made once per Java and Spark release,
# about half a minute; tests/support/jvm_archive.py); without it they only start slower
.venv/bin/python -m tests.support.jvm_archive || echo "JVM class archive not made (see above): the tests' JVMs start without it"
# Hadoop's local file system with permissions set in the JVM, not by a chmod process per file
# (tests/support/local_file_system.py); without it the tests run on Hadoop's own
.venv/bin/python -m tests.support.local_file_system || echo "in-process chmod not made (see above): the tests' JVMs start chmod processes"
# every tier (-m "" lifts the fast-tier default of pyproject.toml) in two processes, each
# with its own SparkSession, S3 server and proxy, a whole test file at a time in the order
# tests/conftest.py gives (files with slow tests first; pytest-xdist would otherwise hand out
# files with many tests first); DSTL_TEST_WORKERS changes the count, 0 runs in this process;
# the slowest tests listed
exec .venv/bin/python -m pytest -q -p no:cacheprovider -m "" -n "${DSTL_TEST_WORKERS:-2}" \
    --dist loadfile --no-loadscope-reorder --durations=15 "$@"
