"""Timers, watermarks, no-data batches and initial state through a real streaming query."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.spark import StatefulStream, read_state, stateful
from tests.support.event_inputs import epoch_ms, event_stream, events, write_event_files
from tests.support.time_processors import (
    GAP_MS,
    SESSION_SCHEMA,
    Alarm,
    BadTtl,
    ClockEcho,
    CountFromInitial,
    InactivitySessions,
    KeyEcho,
    VectorizedInactivitySessions,
)
from tests.support.versions import needs_available_now_timers

pytestmark = pytest.mark.spark

Batches = dict[int, list[tuple[Any, ...]]]

# a and b go silent after 10 s; c's later events move the watermark past their session ends
SILENT_USERS = [events(("a", 0), ("b", 5), ("a", 10)), events(("c", 100)), events(("c", 200))]


def batch_sink(outputs: Batches) -> Callable[[Any, int], None]:
    def sink(df: Any, batch_id: int) -> None:
        outputs[batch_id] = sorted(tuple(row) for row in df.collect())

    return sink


def run_sessions(spark: Any, inputs: Path, checkpoint: Path, processor: Any = None,
                 outputs: Batches | None = None) -> StatefulStream:
    stream = (stateful(event_stream(spark, inputs)).group_by("user")
              .process(processor or InactivitySessions(), SESSION_SCHEMA,
                       checkpoint_location=str(checkpoint), time_mode="event_time", event_time="ts",
                       watermark_delay="10 seconds")
              .foreach_batch(batch_sink(outputs if outputs is not None else {})))
    query = stream.start(trigger={"availableNow": True})
    query.awaitTermination()
    assert query.exception() is None
    return stream


@needs_available_now_timers
@pytest.mark.parametrize("processor", [InactivitySessions(), VectorizedInactivitySessions()],
                         ids=["per-key", "vectorized"])
def test_silent_users_sessions_close_once_the_watermark_passes(
        spark: Any, tmp_path: Path, processor: Any) -> None:
    write_event_files(tmp_path / "in", SILENT_USERS)
    outputs: Batches = {}
    stream = run_sessions(spark, tmp_path / "in", tmp_path / "ckpt", processor, outputs)
    assert outputs[2] == [("a", 2, epoch_ms(10) + GAP_MS), ("b", 1, epoch_ms(5) + GAP_MS)]
    assert all(not rows for batch, rows in outputs.items() if batch != 2)
    assert [p.watermark_ms for p in stream.progress] == [
        0, epoch_ms(0), epoch_ms(90), epoch_ms(190)]
    assert [p.timers_fired for p in stream.progress] == [0, 0, 2, 0]


@needs_available_now_timers
def test_watermark_advance_alone_runs_a_batch_without_input(spark: Any, tmp_path: Path) -> None:
    write_event_files(tmp_path / "in", SILENT_USERS)
    stream = run_sessions(spark, tmp_path / "in", tmp_path / "ckpt")
    assert [p.input_rows for p in stream.progress] == [3, 1, 1, 0]


@needs_available_now_timers
def test_late_rows_are_dropped_and_counted(spark: Any, tmp_path: Path) -> None:
    frames = [events(("a", 100)), events(("b", 70)), events(("a", 89), ("b", 91))]
    write_event_files(tmp_path / "in", frames)
    stream = run_sessions(spark, tmp_path / "in", tmp_path / "ckpt")
    # batch 2 is judged against batch 1's watermark (90 s): 89 s is late, 91 s is not
    assert [p.late_rows for p in stream.progress] == [0, 0, 1]
    assert stream.progress[2].input_rows == 2


@needs_available_now_timers
def test_watermark_and_pending_timers_survive_a_restart(spark: Any, tmp_path: Path) -> None:
    write_event_files(tmp_path / "whole", SILENT_USERS)
    uninterrupted: Batches = {}
    run_sessions(spark, tmp_path / "whole", tmp_path / "ckpt-whole", outputs=uninterrupted)

    # stop after batch 0: a's and b's timers are pending, the watermark is recorded
    write_event_files(tmp_path / "in", SILENT_USERS[:1])
    resumed: Batches = {}
    first = run_sessions(spark, tmp_path / "in", tmp_path / "ckpt", outputs=resumed)
    # batch 1 has no input: the watermark moved from 0 to 0 s of the data (a no-data batch)
    assert [(p.batch_id, p.input_rows) for p in first.progress] == [(0, 3), (1, 0)]
    write_event_files(tmp_path / "in", SILENT_USERS[1:], start=1)
    second = run_sessions(spark, tmp_path / "in", tmp_path / "ckpt", outputs=resumed)
    assert [p.watermark_ms for p in second.progress] == [epoch_ms(0), epoch_ms(90),
                                                         epoch_ms(190)]
    assert resumed.pop(1) == []
    assert list(resumed.values()) == list(uninterrupted.values())


@pytest.mark.version
def test_processing_time_timer_fires_at_a_later_trigger_without_input(
        spark: Any, tmp_path: Path) -> None:
    write_event_files(tmp_path / "in", [events(("a", 0))])
    outputs: Batches = {}
    stream = (stateful(event_stream(spark, tmp_path / "in")).group_by("user")
              .process(Alarm(delay_ms=1500), "user string, event string, batch long",
                       checkpoint_location=str(tmp_path / "ckpt"), time_mode="processing_time")
              .foreach_batch(batch_sink(outputs)))
    query = stream.start(trigger={"processingTime": "200 milliseconds"})
    try:
        deadline = time.monotonic() + 120
        while not any(r[1] == "rang" for rows in outputs.values() for r in rows):
            assert query.exception() is None and time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        query.stop()
    rang = [(batch, rows) for batch, rows in outputs.items() if rows and rows[0][1] == "rang"]
    assert outputs[0] == [("a", "armed", 0)]
    assert rang == [(1, [("a", "rang", 1)])]
    assert stream.progress[1].input_rows == 0


def test_initial_state_is_applied_once_before_the_first_batch(
        spark: Any, tmp_path: Path) -> None:
    initial = spark.createDataFrame(pd.DataFrame({"user": ["a", "z"], "start": [10, 5]}))
    write_event_files(tmp_path / "in", [events(("a", 0), ("b", 1)), events(("a", 2))])
    outputs: Batches = {}
    stream = (stateful(event_stream(spark, tmp_path / "in")).group_by("user")
              .process(CountFromInitial(), "user string, count long",
                       checkpoint_location=str(tmp_path / "ckpt"),
                       initial_state=initial.groupBy("user"))
              .foreach_batch(batch_sink(outputs)))
    query = stream.start(trigger={"availableNow": True})
    query.awaitTermination()
    assert outputs == {0: [("a", 11), ("b", 1)], 1: [("a", 12)]}
    counts = read_state(spark, str(tmp_path / "ckpt")).toPandas()
    assert dict(zip(counts["key"], counts["value"], strict=True))['["z"]'] == "5"


def test_timestamp_and_date_columns_group_like_any_key(spark: Any, tmp_path: Path) -> None:
    frame = pd.DataFrame({"day": [dt.date(2026, 1, 1), dt.date(2026, 1, 1), dt.date(2026, 1, 2)],
                          "ts": pd.to_datetime(["2026-01-01T00:00:00Z"] * 3)})
    write_event_files(tmp_path / "in", [frame])
    outputs: Batches = {}
    df = event_stream(spark, tmp_path / "in", "day date, ts timestamp")
    query = (stateful(df).group_by("day", "ts")
             .process(KeyEcho(), "key string, n long", checkpoint_location=str(tmp_path / "ckpt"))
             .foreach_batch(batch_sink(outputs)).start(trigger={"availableNow": True}))
    query.awaitTermination()
    assert [n for _, n in outputs[0]] == [2, 1]
    assert "datetime.date(2026, 1, 1)" in outputs[0][0][0]


def test_state_reader_shows_pending_timers(spark: Any, tmp_path: Path) -> None:
    write_event_files(tmp_path / "in", SILENT_USERS[:1])
    run_sessions(spark, tmp_path / "in", tmp_path / "ckpt")
    state = read_state(spark, str(tmp_path / "ckpt")).toPandas()
    timers = state[state["kind"] == "timer"]
    assert sorted(zip(timers["key"], timers["expires_at_ms"], strict=True)) == [
        (json.dumps(["a"]), epoch_ms(10) + GAP_MS), (json.dumps(["b"]), epoch_ms(5) + GAP_MS)]


def test_event_time_column_must_be_a_timestamp(spark: Any, tmp_path: Path) -> None:
    df = event_stream(spark, tmp_path, "user string, ts long")
    with pytest.raises(ConfigError, match="event_time: column 'ts' has type long"):
        stateful(df).group_by("user").process(
            InactivitySessions(), SESSION_SCHEMA, checkpoint_location=str(tmp_path / "c"),
            time_mode="event_time", event_time="ts", watermark_delay="1 minute")


def test_watermark_set_with_with_watermark_is_used(spark: Any, tmp_path: Path) -> None:
    df = event_stream(spark, tmp_path).withWatermark("ts", "2 minutes")
    stream = stateful(df).group_by("user").process(
        InactivitySessions(), SESSION_SCHEMA, checkpoint_location=str(tmp_path / "c"),
        time_mode="EventTime")
    time_spec = stream.operator.spec.time
    assert (time_spec.event_time_column, time_spec.watermark_delay_ms) == ("ts", 120_000)


def test_bad_ttl_fails_on_the_driver_naming_the_state(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="ttl of seen"):
        stateful(event_stream(spark, tmp_path)).group_by("user").process(
            BadTtl(), SESSION_SCHEMA, checkpoint_location=str(tmp_path / "c"))


def test_a_batch_run_again_after_its_commit_keeps_its_processing_time(
        spark: Any, tmp_path: Path) -> None:
    batch = spark.createDataFrame(events(("a", 0)))
    outputs: Batches = {}
    stream = (stateful(batch).group_by("user")
              .process(ClockEcho(), "user string, now long",
                       checkpoint_location=str(tmp_path / "c"),
                       time_mode="processing_time")
              .foreach_batch(batch_sink(outputs)))
    stream.run_batch(batch, 0)
    first = outputs[0]
    time.sleep(0.05)
    stream.run_batch(batch, 0)  # the engine runs batch 0 again: it was committed here
    assert outputs[0] == first
