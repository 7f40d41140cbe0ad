"""One writer per state checkpoint in real PySpark: a second query is refused at its start; an
operator whose checkpoint another one of its process took stops before its next batch."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from pyspark_dstl.backend.backend_errors import CheckpointHeldError, FencedError
from pyspark_dstl.backend.fencing.lease import HELD, RELEASED
from pyspark_dstl.spark import stateful
from pyspark_dstl.spark.driver import query_lease as fencing
from tests.support.spark import (
    COUNT_SCHEMA,
    INPUT_SCHEMA,
    CountProcessor,
    count_model,
    file_stream,
    make_batches,
    stored_counts,
    write_batches,
)

pytestmark = pytest.mark.spark
TIMEOUT = 120.0


def counting_query(spark: Any, inputs: Path, checkpoint: Path, engine: Path) -> Any:
    stream = (stateful(file_stream(spark, inputs)).group_by("user")
              .process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=str(checkpoint),
                       partitions=2))
    return stream, stream.start(trigger={"processingTime": "200 milliseconds"},
                                engine_checkpoint=str(engine))


def test_a_second_query_on_a_held_state_checkpoint_is_refused_at_its_start(
        spark: Any, tmp_path: Path) -> None:
    frames = make_batches(3, rows=200, keys=50, seed=21)
    write_batches(tmp_path / "in", frames)
    first_stream, first = counting_query(spark, tmp_path / "in", tmp_path / "ckpt",
                                         tmp_path / "engine-1")
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(first_stream.progress) < len(frames):
            assert time.monotonic() < deadline and first.exception() is None
            time.sleep(0.2)
        run_id = fencing.hold(first_stream.operator).run_id
        url = (tmp_path / "ckpt").as_uri()
        with pytest.raises(CheckpointHeldError, match=f"checkpoint {url} is held by run "
                                                      f"{run_id}"):
            counting_query(spark, tmp_path / "in", tmp_path / "ckpt", tmp_path / "engine-2")
        assert [q.id for q in spark.streams.active] == [first.id]
    finally:
        first.stop()
    assert stored_counts(spark, str(tmp_path / "ckpt")) == count_model(frames)


def test_an_operator_whose_checkpoint_another_operator_took_stops_before_its_next_batch(
        spark: Any, tmp_path: Path) -> None:
    frames = make_batches(3, rows=200, keys=50, seed=22)

    def operator_stream() -> Any:
        frame = spark.createDataFrame(frames[0], schema=INPUT_SCHEMA)
        return (stateful(frame).group_by("user")
                .process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=str(tmp_path / "ckpt"),
                         partitions=2))

    first, second = operator_stream(), operator_stream()
    first.run_batch(spark.createDataFrame(frames[0], schema=INPUT_SCHEMA), 0)
    second.run_batch(spark.createDataFrame(frames[1], schema=INPUT_SCHEMA), 1)
    with pytest.raises(FencedError, match="let go of it"):
        first.run_batch(spark.createDataFrame(frames[2], schema=INPUT_SCHEMA), 2)
    assert stored_counts(spark, str(tmp_path / "ckpt")) == count_model(frames[:2])


def test_a_query_that_ended_lets_go_of_its_location_when_await_termination_returns(
        spark: Any, tmp_path: Path) -> None:
    write_batches(tmp_path / "in", make_batches(2, rows=50, keys=10, seed=23))
    stream = (stateful(file_stream(spark, tmp_path / "in")).group_by("user")
              .process(CountProcessor(), COUNT_SCHEMA,
                       checkpoint_location=str(tmp_path / "ckpt"), partitions=2))
    query = stream.start(trigger={"availableNow": True}, engine_checkpoint=str(tmp_path / "e"))
    lease = fencing.hold(stream.operator)
    query.awaitTermination()
    # let go at once (not at the next renewal, a third of the lease later, which may come
    # when the interpreter already shut down the threads the end file needs)
    assert lease.state == RELEASED


def test_a_stopped_query_lets_go_of_its_location_when_stop_returns(
        spark: Any, tmp_path: Path) -> None:
    write_batches(tmp_path / "in", make_batches(1, rows=50, keys=10, seed=24))
    stream, query = counting_query(spark, tmp_path / "in", tmp_path / "ckpt", tmp_path / "e")
    lease = fencing.hold(stream.operator)
    query.processAllAvailable()
    assert lease.state == HELD
    query.stop()
    assert lease.state == RELEASED
