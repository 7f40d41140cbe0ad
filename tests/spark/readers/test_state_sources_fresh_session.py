"""This backend's readers of Spark's state sources by their own names in a fresh session: a
new Python process, its own SparkSession, no import of pyspark_dstl, no switch, no
PYTHONPATH, run outside the checkout. PySpark registers the `DefaultSource` of every installed
top-level module named pyspark_*; data_sources/ holds one per name."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.spark.readers.test_fresh_session import fresh_environment
from tests.support.change_feed_jobs import item_frames, run_producer
from tests.support.compat_runs import write_inputs
from tests.support.spark import session_settings

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

FRESH_JOB = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[1]").appName("fresh-state-sources")
    for key, value in json.loads(sys.argv[2]).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    location = sys.argv[1]
    state = (spark.read.format("dstl-statestore").option("stateVarName", "items")
             .load(location).count())
    metadata = spark.read.format("dstl-state-metadata").load(location).collect()
    changes = (spark.readStream.format("dstl-changes").option("stateVarName", "items")
               .option("feedName", "fresh").load(location).writeStream.format("memory")
               .queryName("changes").trigger(availableNow=True).start())
    changes.awaitTermination()
    fed = spark.sql("SELECT max(batch_id) AS newest FROM changes").collect()[0]["newest"]
    imported = sorted(m for m in sys.modules if m.startswith("pyspark_dstl"))
    spark.stop()
    print("RESULT " + json.dumps({"state": state, "operator": metadata[0]["operatorName"],
                                  "newest": fed, "driver_imported": imported}))
""")


def test_the_state_sources_and_the_feed_work_by_name_in_a_fresh_session(
        spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", item_frames(2, rows=30, users=5, seed=3))
    run_producer(spark, tmp_path / "in", tmp_path / "ckpt")
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
    assert result["state"] > 0
    assert result["operator"] == "transformWithStateInPandasExec"
    assert result["newest"] == 1
    assert result["driver_imported"] == []  # only Spark's lookup and its workers imported it
