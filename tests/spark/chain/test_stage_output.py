"""Every way a stage's output reaches the next operator (spark.dstl.query.outputMode: files,
collect, cache) gives a chain the same batches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from tests.support.chain_compare import ChainScenario, run_chain
from tests.support.chain_processors import RelayWithCloser
from tests.support.tws_compare import session_conf

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

CHAIN = ChainScenario("window_counts_after_dedup", RelayWithCloser, lambda first: first
                      .dropDuplicates(["k", "at", "tag"])
                      .groupBy(F.window("at", "10 seconds")).count())


def test_collect_and_cache_hand_output_on_as_files_do(spark: Any, tmp_path: Path) -> None:
    by_files = run_chain(spark, CHAIN, "dropin", tmp_path / "files")
    assert any(by_files.values())
    for mode in ("collect", "cache"):
        with session_conf(spark, {"spark.dstl.query.outputMode": mode}):
            assert run_chain(spark, CHAIN, "dropin", tmp_path / mode) == by_files, mode
