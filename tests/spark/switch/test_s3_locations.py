"""The switch on `s3://` and `s3a://` checkpoint locations, against the local S3 server: state
through the project's S3 client, Spark's engine checkpoint where
spark.dstl.query.engineCheckpointLocation says, and a start without it refused by name before
anything is written."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pyspark_dstl import DstlError
from tests.support.compat_processors import RunningCountPandas
from tests.support.compat_runs import input_stream, write_inputs

pytestmark = pytest.mark.spark

USERS = "user string, page string"
COUNTS = "user string, count long"
FIRST = pd.DataFrame({"user": ["a", "a", "b"], "page": ["x", "y", "z"]})
SECOND = pd.DataFrame({"user": ["a", "c"], "page": ["x", "y"]})
THIRD = pd.DataFrame({"user": ["b", "c", "c"], "page": ["x", "y", "z"]})
ENGINE_SETTING = "spark.dstl.query.engineCheckpointLocation"


@pytest.fixture
def s3_session(dropin: Any, s3: Any) -> Iterator[Any]:
    """The switched session with the local S3 server's settings, as a user sets them in the
    session (spark.dstl.changelog.s3.*); removed again after the test."""
    keys = {f"spark.dstl.{key}": str(value) for key, value in s3.query_settings().items()}
    for key, value in keys.items():
        dropin.conf.set(key, value)
    try:
        yield dropin
    finally:
        for key in [*keys, ENGINE_SETTING]:
            dropin.conf.unset(key)


def counts_over(spark: Any, directory: Path, *frames: pd.DataFrame, start: int = 0) -> Any:
    """The README's query: a running count per user with PySpark's own processor API."""
    write_inputs(directory, list(frames), start=start)
    return input_stream(spark, directory, USERS).groupBy("user").transformWithStateInPandas(
        RunningCountPandas(), COUNTS, "Update", "None")


def rows_of(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(row) for row in df.collect())


def engine_commits(engine: Path) -> list[str]:
    """The batch ids in Spark's commit log of an engine checkpoint (its .crc files left out)."""
    return sorted(name for name in os.listdir(engine / "commits") if not name.startswith("."))


def run_to_the_end(writer: Any, *path: str) -> None:
    query = writer.start(*path)
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def test_the_parquet_sink_on_an_s3_location_keeps_state_on_s3_and_continues_after_a_restart(
        s3_session: Any, s3: Any, tmp_path: Path) -> None:
    s3_session.conf.set(ENGINE_SETTING, str(tmp_path / "engine"))
    output = str(tmp_path / "out")
    writer = (counts_over(s3_session, tmp_path / "in", FIRST, SECOND).writeStream
              .format("parquet").option("checkpointLocation", s3.url))
    run_to_the_end(writer, output)
    write_inputs(tmp_path / "in", [THIRD], start=2)
    run_to_the_end(writer, output)
    assert rows_of(s3_session.read.parquet(output)) == [
        ("a", 2), ("a", 3), ("b", 1), ("b", 2), ("c", 1), ("c", 3)]
    keys = s3.direct_keys()
    assert [k for k in keys if k.startswith("commits/")] == [f"commits/{b}.0" for b in range(3)]
    assert any(k.startswith("state/") and k.endswith(".changelog") for k in keys)
    assert not any(k.startswith("engine/") for k in keys)
    assert engine_commits(tmp_path / "engine") == ["0", "1", "2"]


def test_foreach_batch_on_an_s3a_location_runs_with_the_engine_checkpoint_from_the_setting(
        s3_session: Any, s3: Any, tmp_path: Path) -> None:
    s3_session.conf.set(ENGINE_SETTING, str(tmp_path / "engine"))
    seen: dict[int, list[tuple[Any, ...]]] = {}
    location = "s3a://" + s3.url[len("s3://"):]
    run_to_the_end(counts_over(s3_session, tmp_path / "in", FIRST, SECOND).writeStream
                   .option("checkpointLocation", location)
                   .foreachBatch(lambda df, batch_id: seen.update({batch_id: rows_of(df)})))
    assert seen == {0: [("a", 2), ("b", 1)], 1: [("a", 3), ("c", 1)]}
    assert [k for k in s3.direct_keys() if k.startswith("commits/")] == ["commits/0.0",
                                                                         "commits/1.0"]
    assert engine_commits(tmp_path / "engine") == ["0", "1"]


@pytest.mark.parametrize("scheme", ["s3", "s3a"])
def test_an_s3_location_without_the_engine_setting_is_refused_before_anything_is_written(
        s3_session: Any, s3: Any, tmp_path: Path, scheme: str) -> None:
    location = f"{scheme}://" + s3.url[len("s3://"):]
    writer = (counts_over(s3_session, tmp_path / "in", FIRST).writeStream.format("parquet")
              .option("checkpointLocation", location))
    with pytest.raises(DstlError) as refused:
        writer.start(str(tmp_path / "out"))
    first_line = str(refused.value).splitlines()[0]
    assert first_line.startswith(f"{ENGINE_SETTING}: the checkpoint location {location!r}")
    assert f'spark.conf.set("{ENGINE_SETTING}", ' in first_line
    assert s3.direct_keys() == []
    assert not (tmp_path / "out").exists()
    assert s3_session.streams.active == []


def test_the_engine_setting_is_honoured_for_a_local_location_too(dropin: Any,
                                                                  tmp_path: Path) -> None:
    dropin.conf.set(ENGINE_SETTING, str(tmp_path / "engine"))
    try:
        run_to_the_end(counts_over(dropin, tmp_path / "in", FIRST).writeStream
                       .option("checkpointLocation", str(tmp_path / "ckpt"))
                       .foreachBatch(lambda df, batch_id: None))
    finally:
        dropin.conf.unset(ENGINE_SETTING)
    assert engine_commits(tmp_path / "engine") == ["0"]
    assert not (tmp_path / "ckpt" / "engine").exists()
