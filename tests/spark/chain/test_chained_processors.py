"""The processors of chained steps (spark/chain: aggregation, session windows, deduplication)
on a real RocksDB store, batch after batch, without Spark: what each output mode emits and
when state leaves, as Spark's operators do."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from pyspark_dstl.spark.chain.aggregates import AggregateSpec
from pyspark_dstl.spark.chain.aggregation import (
    AggregationPlan,
    AggregationProcessor,
    KeyPart,
)
from pyspark_dstl.spark.chain.dedup import DeduplicationProcessor, DedupPlan
from pyspark_dstl.spark.chain.session_windows import SessionAggregationProcessor
from tests.support.backend import BackendEnv, env  # noqa: F401 - fixture
from tests.support.chain_tasks import STAMP, Partition, at


def window_count(mode: str) -> AggregationPlan:
    return AggregationPlan(
        keys=(KeyPart("window", ("start", "end")),),
        aggregates=(AggregateSpec("count", "count", (), pa.int64()),),
        output_names=("window", "count"), key_types=(STAMP, STAMP), mode=mode,
        event_time_column="end")


def windows(*rows: tuple[int, int]) -> pa.Table:
    return pa.table({"start": pa.array([at(s) for s, _ in rows], STAMP),
                     "end": pa.array([at(e) for _, e in rows], STAMP)})


COUNTS = pa.schema([("window", pa.struct([("start", STAMP), ("end", STAMP)])),
                    ("count", pa.int64())])


def window(start: int, end: int, count: int) -> dict[str, Any]:
    return {"window": {"start": at(start), "end": at(end)}, "count": count}


def test_append_emits_a_window_once_the_watermark_reaches_its_end_and_drops_it(
        env: BackendEnv) -> None:  # noqa: F811 - fixture
    task = Partition(env, ("timestamp", "timestamp"))
    counts = AggregationProcessor(window_count("append"))
    keys = ("start", "end")
    assert task.run(counts, windows((0, 10), (0, 10), (10, 20)), keys, COUNTS, 0) == []
    assert task.run(counts, windows((10, 20)), keys, COUNTS, 10) == [window(0, 10, 2)]
    assert task.run(counts, windows(), keys, COUNTS, 19) == []
    assert task.run(counts, windows(), keys, COUNTS, 20) == [window(10, 20, 2)]
    assert task.run(counts, windows(), keys, COUNTS, 60) == []


def test_append_emits_a_window_made_and_closed_in_the_same_batch(
        env: BackendEnv) -> None:  # noqa: F811 - fixture
    task = Partition(env, ("timestamp", "timestamp"))
    counts = AggregationProcessor(window_count("append"))
    assert task.run(counts, windows((0, 10)), ("start", "end"), COUNTS, 35) == [
        window(0, 10, 1)]


def test_update_emits_changed_windows_and_forgets_them_after_the_watermark(
        env: BackendEnv) -> None:  # noqa: F811 - fixture
    task = Partition(env, ("timestamp", "timestamp"))
    counts = AggregationProcessor(window_count("update"))
    keys = ("start", "end")
    assert task.run(counts, windows((0, 10), (10, 20)), keys, COUNTS, 0) == [
        window(0, 10, 1), window(10, 20, 1)]
    assert task.run(counts, windows(), keys, COUNTS, 10) == []  # due: gone, not emitted
    assert task.run(counts, windows((0, 10), (10, 20)), keys, COUNTS, 10) == [
        window(0, 10, 1), window(10, 20, 2)]  # [0, 10) starts over, as in Spark


def test_complete_emits_every_window_every_batch_and_never_forgets(
        env: BackendEnv) -> None:  # noqa: F811 - fixture
    task = Partition(env, ("timestamp", "timestamp"))
    counts = AggregationProcessor(window_count("complete"))
    keys = ("start", "end")
    task.run(counts, windows((0, 10)), keys, COUNTS, 0)
    assert task.run(counts, windows((10, 20)), keys, COUNTS, 100) == [
        window(0, 10, 1), window(10, 20, 1)]
    assert task.run(counts, windows(), keys, COUNTS, 200) == [
        window(0, 10, 1), window(10, 20, 1)]


SESSIONS = pa.schema([("k", pa.string()),
                      ("session", pa.struct([("start", STAMP), ("end", STAMP)])),
                      ("count", pa.int64())])


def session_rows(*rows: tuple[str, int]) -> pa.Table:
    return pa.table({"k": [k for k, _ in rows],
                     "s": pa.array([at(t) for _, t in rows], STAMP),
                     "e": pa.array([at(t + 5) for _, t in rows], STAMP)})


def test_sessions_merge_across_batches_and_close_at_the_watermark(
        env: BackendEnv) -> None:  # noqa: F811 - fixture
    part = KeyPart("session", ("s", "e"))
    plan = AggregationPlan(
        keys=(KeyPart("k", ("k",)), part),
        aggregates=(AggregateSpec("count", "count", (), pa.int64()),),
        output_names=("k", "session", "count"), key_types=(pa.string(), STAMP, STAMP),
        mode="append", event_time_column="e")
    sessions = SessionAggregationProcessor(plan, part)
    task = Partition(env, ("string",))
    assert task.run(sessions, session_rows(("a", 1), ("a", 3), ("b", 20)), ("k",), SESSIONS,
                    0) == []
    # a@8 touches [1, 8): one session [1, 13); b's [20, 25) is not due at 15
    assert task.run(sessions, session_rows(("a", 8)), ("k",), SESSIONS, 15) == [
        {"k": "a", "session": {"start": at(1), "end": at(13)}, "count": 3}]
    assert task.run(sessions, session_rows(), ("k",), SESSIONS, 25) == [
        {"k": "b", "session": {"start": at(20), "end": at(25)}, "count": 1}]


ROWS = pa.schema([("k", pa.string()), ("at", STAMP)])


def dedup_rows(*rows: tuple[str, int]) -> pa.Table:
    return pa.table({"k": [k for k, _ in rows], "at": pa.array([at(t) for _, t in rows],
                                                             STAMP)})


def test_within_watermark_a_key_is_a_duplicate_until_its_time_plus_the_delay(
        env: BackendEnv) -> None:  # noqa: F811 - fixture
    plan = DedupPlan(("k",), ("k", "at"), "at", within_watermark=True, delay_ms=10_000)
    dedup = DeduplicationProcessor(plan)
    task = Partition(env, ("string",))
    assert task.run(dedup, dedup_rows(("a", 1), ("a", 2)), ("k",), ROWS, 0) == [
        {"k": "a", "at": at(1)}]
    # the entry expires at 11 s: at watermark 11 it still drops this batch's row, then goes
    assert task.run(dedup, dedup_rows(("a", 9)), ("k",), ROWS, 11) == []
    assert task.run(dedup, dedup_rows(("a", 12)), ("k",), ROWS, 11) == [
        {"k": "a", "at": at(12)}]


def test_without_event_time_in_the_keys_a_key_is_a_duplicate_forever(
        env: BackendEnv) -> None:  # noqa: F811 - fixture
    dedup = DeduplicationProcessor(DedupPlan(("k",), ("k", "at"), "at"))
    task = Partition(env, ("string",))
    assert task.run(dedup, dedup_rows(("a", 1)), ("k",), ROWS, 0) == [{"k": "a", "at": at(1)}]
    assert task.run(dedup, dedup_rows(("a", 500)), ("k",), ROWS, 400) == []
