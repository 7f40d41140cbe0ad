#!/usr/bin/env bash
# The version tier: the tests marked `version` (the drop-in switch, the builder's queries that
# depend on PySpark, the main job, the version refusals) on every supported PySpark besides the
# one of .venv, which the whole suite runs. Each version is installed once per machine, alone
# (pip --no-deps: every other package is .venv's), into a cache directory outside the checkout,
# and run with .venv's Python and that directory first on PYTHONPATH; Spark's Python workers get
# the same interpreter and path (PYSPARK_PYTHON, the environment), which a test checks.
#   bash scripts/run_version_tier.sh                 # 4.0.5, 4.1.4 and 4.2.1
#   DSTL_TIER_VERSIONS=4.0.5 bash scripts/run_version_tier.sh -x   # one version, pytest options
set -euo pipefail
cd "$(dirname "$0")/.."
VERSIONS="${DSTL_TIER_VERSIONS:-4.0.5 4.1.4 4.2.1}"
CACHE="${DSTL_PYSPARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pyspark-dstl/pyspark}"
bash scripts/bootstrap.sh
PYTHON="$PWD/.venv/bin/python"
mkdir -p "$CACHE"

install_pyspark() {  # $1: version; a finished install is renamed into place, never half there
    local version="$1" target="$CACHE/$1" partial="$CACHE/.partial-$1-$$"
    [ -d "$target" ] && return 0
    rm -rf "$partial"
    # PyPI has pyspark as a source archive only: pip builds a wheel of ~450 MB first, stored
    # uncompressed (a third of the time of a compressed one) and not kept in pip's cache
    "$PYTHON" -m pip install --quiet --no-deps --no-cache-dir --target "$partial" \
        --config-settings=--build-option=--compression=stored "pyspark==$version" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    mv -T "$partial" "$target" 2>/dev/null || rm -rf "$partial"  # another run was first
}

started=$(date +%s)
pids=()
for version in $VERSIONS; do  # downloads and builds overlap: faster than one after another
    install_pyspark "$version" & pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
echo "version tier: PySpark $VERSIONS installed in $(( $(date +%s) - started )) s ($CACHE)"

run_version() {  # $1: version; the rest: pytest options
    local version="$1"; shift
    local found
    found=$(PYTHONPATH="$CACHE/$version" "$PYTHON" -c "import pyspark; print(pyspark.__version__)")
    if [ "$found" != "$version" ]; then
        echo "PYTHONPATH=$CACHE/$version imports PySpark $found, not $version"
        return 1
    fi
    local version_started; version_started=$(date +%s)
    PYTHONPATH="$CACHE/$version" PYSPARK_PYTHON="$PYTHON" DSTL_TIER_PYSPARK="$version" \
        "$PYTHON" -m pytest -q -p no:cacheprovider -m version -n 0 -rs --durations=10 \
        --basetemp="$LOGS/tmp-$version" "$@" || return 1
    echo "version tier: PySpark $version passed in $(( $(date +%s) - version_started )) s"
}

# one version after the other, one pytest process (one SparkSession) each: side by side, on a
# busy 2-core machine Spark's Python workers missed its 10 s to connect back
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/dstl-version-tier-XXXXXX")
tier_started=$(date +%s)
failed=""
for version in $VERSIONS; do
    echo "=== version tier: PySpark $version ==="
    run_version "$version" "$@" || failed="$failed $version"
done
echo "version tier: tests in $(( $(date +%s) - tier_started )) s, all in $(( $(date +%s) - started )) s"
rm -rf "$LOGS"
if [ -n "$failed" ]; then
    echo "version tier: FAILED on PySpark$failed" >&2
    exit 1
fi
