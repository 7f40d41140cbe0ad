"""The state reader by name in a fresh session: a new Python process, its own SparkSession,
no import of pyspark_dstl, no PYTHONPATH, run outside the checkout. PySpark registers the
`DefaultSource` of installed top-level packages named pyspark_*; this is that path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pyspark_dstl.spark import stateful
from tests.support.spark import (
    COUNT_SCHEMA,
    CountProcessor,
    count_model,
    make_batches,
    session_settings,
)

pytestmark = pytest.mark.spark

FRESH_JOB = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[1]").appName("fresh-session")
    for key, value in json.loads(sys.argv[2]).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    rows = spark.read.format("dstl-state").load(sys.argv[1]).collect()
    counts = {json.loads(r["key"])[0]: json.loads(r["value"])
              for r in rows if r["state_variable"] == "count"}
    imported = sorted(m for m in sys.modules if m.startswith("pyspark_dstl"))
    spark.stop()
    print("RESULT " + json.dumps({"counts": counts, "driver_imported": imported}))
""")


def fresh_environment() -> dict[str, str]:
    """The test process's environment without anything that points Python at the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


@pytest.mark.slow
@pytest.mark.timeout(900)  # a second JVM on a loaded machine
def test_dstl_state_reads_a_checkpoint_in_a_fresh_session_without_an_import(
        spark: Any, tmp_path: Path) -> None:
    frame = make_batches(1, rows=80, keys=15, seed=51)[0]
    df = spark.createDataFrame(frame)
    stream = (stateful(df).group_by("user")
              .process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=str(tmp_path / "ckpt"),
                       partitions=2))
    stream.run_batch(df, 0)
    settings = {k: v for k, v in session_settings().items()
                if k.startswith(("spark.driver.", "spark.ui."))}
    work = tmp_path / "elsewhere"
    work.mkdir()
    done = subprocess.run([sys.executable, "-c", FRESH_JOB, str(tmp_path / "ckpt"),
                           json.dumps(settings)], cwd=work, env=fresh_environment(),
                          capture_output=True, text=True, timeout=800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["counts"] == count_model([frame])
    assert result["driver_imported"] == []  # only Spark's lookup worker imported it
