"""Time in PySpark-style processors on this backend: processing-time timers, TimerValues and
TTL in milliseconds, in real PySpark. Processing time is the wall clock, so these tests wait
for it (about a second each), never assert on how long anything took."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pyspark_dstl.spark import StatefulStream, read_state, stateful
from tests.support.compat_processors import (
    ExpiringValues,
    ProcessingTimeReminder,
    TimerValuesProbe,
)
from tests.support.compat_runs import input_stream, run_to_end, write_inputs

pytestmark = pytest.mark.spark

USERS = "user string, page string"


def users(*names: str) -> pd.DataFrame:
    return pd.DataFrame({"user": list(names), "page": ["p"] * len(names)})


def batch_now_ms(stream: StatefulStream, batch_id: int) -> int:
    """The processing time the driver chose for a batch, as its commit entry records it."""
    entry = stream.operator.commit_log().read(batch_id)
    return int(entry.extra["time"]["now_ms"])


def wait_until_ms(epoch_ms: int) -> None:
    while time.time() * 1000 <= epoch_ms:
        time.sleep(0.05)


def reminders(spark: Any, tmp_path: Path, delay_ms: int) -> StatefulStream:
    return (stateful(input_stream(spark, tmp_path / "in", USERS)).group_by("user")
            .transformWithStateInPandas(ProcessingTimeReminder(delay_ms),
                                        "user string, event string, at_ms long, "
                                        "timers string", "Update", "ProcessingTime",
                                        checkpoint_location=str(tmp_path / "ckpt")))


def test_processing_time_timer_fires_at_the_first_trigger_after_its_expiry(
        spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", [users("a")])
    first = run_to_end(reminders(spark, tmp_path, 500), {})
    registered = first[0][0]
    expiry = registered["at_ms"] + 500
    assert registered == {"user": "a", "event": "input", "at_ms": registered["at_ms"],
                          "timers": str(expiry)}
    wait_until_ms(registered["at_ms"] + 1000 + 100)  # the deleted timer would be due too
    second = run_to_end(reminders(spark, tmp_path, 500), {})
    [(batch_id, rows)] = second.items()
    assert batch_id == 1
    assert [(r["user"], r["event"], r["timers"]) for r in rows] == [("a", "timer", str(expiry))]
    assert rows[0]["at_ms"] >= expiry


def expiring(spark: Any, tmp_path: Path) -> StatefulStream:
    return (stateful(input_stream(spark, tmp_path / "in", USERS)).group_by("user")
            .transformWithStateInPandas(ExpiringValues(short_ms=1000, long_ms=60_000),
                                        "user string, short boolean, long boolean", "Update",
                                        "ProcessingTime",
                                        checkpoint_location=str(tmp_path / "ckpt")))


def test_ttl_duration_ms_sets_the_expiry_in_milliseconds(spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", [users("a")])
    stream = expiring(spark, tmp_path)
    run_to_end(stream, {})
    now = batch_now_ms(stream, 0)
    state = read_state(spark, str(tmp_path / "ckpt")).toPandas()
    expiries = dict(zip(state["state_variable"], state["expires_at_ms"], strict=True))
    assert expiries == {"short": now + 1000, "long": now + 60_000}
    assert set(state["value"].map(json.loads).map(tuple)) == {(1,)}


def test_a_value_with_a_1000_ms_ttl_is_gone_a_second_later(spark: Any,
                                                           tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", [users("a")])
    first = expiring(spark, tmp_path)
    run_to_end(first, {})
    wait_until_ms(batch_now_ms(first, 0) + 1000 + 100)
    write_inputs(tmp_path / "in", [users("a")], start=1)
    outputs = run_to_end(expiring(spark, tmp_path), {})
    assert outputs == {1: [{"user": "a", "short": False, "long": True}]}


def probe_timer_values(spark: Any, tmp_path: Path, mode: str) -> tuple[StatefulStream,
                                                                     dict[str, Any]]:
    write_inputs(tmp_path / "in", [users("a")])
    stream = (stateful(input_stream(spark, tmp_path / "in", USERS)).group_by("user")
              .transformWithStateInPandas(TimerValuesProbe(), "processing_ms long, "
                                          "watermark_ms long", "Update", mode,
                                          checkpoint_location=str(tmp_path / "ckpt")))
    [row] = run_to_end(stream, {})[0]
    return stream, row


def test_timer_values_are_minus_one_without_a_time_mode(spark: Any, tmp_path: Path) -> None:
    _, row = probe_timer_values(spark, tmp_path, "None")
    assert row == {"processing_ms": -1, "watermark_ms": -1}


def test_timer_values_carry_the_batch_processing_time_and_watermark_zero(
        spark: Any, tmp_path: Path) -> None:
    stream, row = probe_timer_values(spark, tmp_path, "ProcessingTime")
    assert row == {"processing_ms": batch_now_ms(stream, 0), "watermark_ms": 0}
