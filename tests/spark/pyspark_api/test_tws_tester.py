"""PySpark's own unit-test harness, TwsTester, drives the same processors that run on this
backend, and both meet the same expectations: a processor tested with TwsTester needs no edit
to run here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pyspark_dstl.spark import read_state, stateful
from tests.support.compat_processors import EventTimeSessions, RunningCountRows
from tests.support.compat_runs import input_stream, run_to_end, write_inputs

pytestmark = pytest.mark.spark
tws_tester = pytest.importorskip("pyspark.sql.streaming.tws_tester")

# ---- event-time sessions (transformWithStateInPandas) -----------------------------------------

GAP_MS, DELAY_MS = 10_000, 5_000
EVENTS = [[("a", 100_000), ("a", 101_000)], [("b", 200_000)]]  # (user, event time ms) per batch
# the watermark each batch runs with: 0, then newest event of the batch before minus the delay
WATERMARKS = [96_000, 195_000]
SESSIONS = [{"user": "a", "session_end_ms": 111_000, "events": 2, "fired_ms": 111_000}]


def events_frame(batch: list[tuple[str, int]]) -> pd.DataFrame:
    return pd.DataFrame({"user": [u for u, _ in batch],
                         "ts": pd.to_datetime([ms for _, ms in batch], unit="ms")})


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
            for row in frame.to_dict("records")]


def test_tws_tester_closes_the_session_once_the_watermark_passes_its_end() -> None:
    tester = tws_tester.TwsTester(EventTimeSessions(GAP_MS), timeMode="EventTime",
                                  eventTimeExtractor=lambda row: row["ts"].value // 1_000_000)
    emitted: list[dict[str, Any]] = []
    for batch, watermark in zip(EVENTS, WATERMARKS, strict=True):
        frame = events_frame(batch)
        for user in sorted(set(frame["user"])):
            emitted += records(tester.testInPandas(user, frame[frame["user"] == user]))
        emitted += records(tester.setWatermark(watermark))
    assert emitted == SESSIONS


def test_this_backend_closes_the_session_once_the_watermark_passes_its_end(
        spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", [events_frame(batch) for batch in EVENTS])
    source = input_stream(spark, tmp_path / "in", "user string, ts timestamp")
    stream = (stateful(source.withWatermark("ts", f"{DELAY_MS // 1000} seconds"))
              .group_by("user")
              .transformWithStateInPandas(EventTimeSessions(GAP_MS),
                                          "user string, session_end_ms long, events long, "
                                          "fired_ms long", "Append", "EventTime",
                                          checkpoint_location=str(tmp_path / "ckpt")))
    outputs = run_to_end(stream, {})
    assert [row for batch_id in sorted(outputs) for row in outputs[batch_id]] == SESSIONS
    assert [p.watermark_ms for p in stream.progress][1:] == WATERMARKS


# ---- running count (transformWithState, Rows) --------------------------------------------------

PAGES = [[("a", "x"), ("a", "y"), ("b", "x")], [("a", "z")]]
COUNTS = [[{"user": "a", "count": 2}, {"user": "b", "count": 1}], [{"user": "a", "count": 3}]]
FINAL_STATE = {"a": (3,), "b": (1,)}


def test_tws_tester_counts_rows_per_key() -> None:
    from pyspark.sql import Row

    tester = tws_tester.TwsTester(RunningCountRows())
    emitted = []
    for batch in PAGES:
        users = sorted({user for user, _ in batch})
        emitted.append([row.asDict() for user in users for row in tester.test(
            user, [Row(user=u, page=p) for u, p in batch if u == user])])
    assert emitted == COUNTS
    assert {user: tester.peekValueState("count", user) for user in FINAL_STATE} == FINAL_STATE


def test_this_backend_counts_rows_per_key(spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", [pd.DataFrame(b, columns=["user", "page"]) for b in PAGES])
    stream = (stateful(input_stream(spark, tmp_path / "in", "user string, page string"))
              .group_by("user")
              .transformWithState(RunningCountRows(), "user string, count long", "Update",
                                  "None", checkpoint_location=str(tmp_path / "ckpt")))
    outputs = run_to_end(stream, {})
    assert [outputs[batch_id] for batch_id in sorted(outputs)] == COUNTS
    state = read_state(spark, str(tmp_path / "ckpt")).toPandas()
    assert {json.loads(k)[0]: tuple(json.loads(v))
            for k, v in zip(state["key"], state["value"], strict=True)} == FINAL_STATE
