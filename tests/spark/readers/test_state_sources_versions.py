"""Spark's state sources and the change feed on every supported PySpark (the version tier runs
the tests marked `version` on 4.0 to 4.2 too): reads routed by the switch, the same readers by
their own names, and the feed as a stream. PySpark 4.0 refuses to register a name its lookup
already registered; these reads register this package's sources in a session that may have
found them by itself first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.change_feed_jobs import (
    everything,
    item_frames,
    mirror_of,
    run_consumer,
    run_producer,
    state_of,
)
from tests.support.compat_runs import write_inputs
from tests.support.state_data import plain

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def location(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint location of a query on the switch: item counts per user, two batches."""
    work = tmp_path_factory.mktemp("state-sources-versions")
    write_inputs(work / "in", item_frames(2, rows=30, users=5, seed=41))
    run_producer(spark, work / "in", work / "ckpt")
    return work / "ckpt"


@pytest.mark.version
def test_statestore_through_the_switch_equals_the_reader_by_its_own_name(
        dropin: Any, location: Path) -> None:
    routed = (dropin.read.format("statestore").option("stateVarName", "items")
              .load(str(location)))
    by_name = (dropin.read.format("dstl-statestore").option("stateVarName", "items")
               .load(str(location)))
    rows = sorted(map(plain, routed.collect()), key=repr)
    assert rows and rows == sorted(map(plain, by_name.collect()), key=repr)
    assert routed.schema == by_name.schema


@pytest.mark.version
def test_state_metadata_through_the_switch_names_pysparks_operator_and_the_batches(
        dropin: Any, location: Path) -> None:
    rows = dropin.read.format("state-metadata").load(str(location)).collect()
    assert [(r["operatorId"], r["operatorName"], r["minBatchId"], r["maxBatchId"])
            for r in rows] == [(0, "transformWithStateInPandasExec", 0, 1)]


@pytest.mark.version
def test_the_change_stream_mirrors_the_state(spark: Any, location: Path,
                                             tmp_path: Path) -> None:
    batches: dict[int, list[Any]] = {}
    run_consumer(spark, location, tmp_path / "feed", batches)
    mirror = mirror_of(everything(batches))
    assert mirror and mirror == state_of(spark, str(location))
