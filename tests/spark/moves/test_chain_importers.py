"""The chained import's processors (spark/moves/chain_import.py) on a real RocksDB store,
without Spark: state imported from Spark's rows is what the chained step's own processor then
reads, merges and evicts, exactly as if it had written it (buffers, seen keys, expiries and
timers)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from pyspark_dstl.spark.chain.aggregates import AggregateSpec
from pyspark_dstl.spark.chain.aggregation import AggregationPlan, AggregationProcessor, KeyPart
from pyspark_dstl.spark.chain.dedup import DeduplicationProcessor, DedupPlan
from pyspark_dstl.spark.moves.chain_import import (
    EXPIRES,
    AggregationImporter,
    DedupImporter,
    buffer_column,
)
from tests.support.backend import BackendEnv, env  # noqa: F401 - fixture
from tests.support.chain_tasks import STAMP, Partition, at

NOTHING = pa.schema([])
WINDOW = ("start", "end")
TOTALS = pa.schema([("window", pa.struct([("start", STAMP), ("end", STAMP)])),
                    ("count", pa.int64()), ("total", pa.int64())])
ROWS = pa.schema([("k", pa.string()), ("at", STAMP)])


def window_totals() -> AggregationPlan:
    return AggregationPlan(
        keys=(KeyPart("window", WINDOW),),
        aggregates=(AggregateSpec("count", "count", (), pa.int64()),
                    AggregateSpec("total", "sum", ("v",), pa.int64())),
        output_names=("window", "count", "total"), key_types=(STAMP, STAMP), mode="append",
        event_time_column="end")


def rows(*items: tuple[str, int]) -> pa.Table:
    return pa.table({"k": [k for k, _ in items],
                     "at": pa.array([at(t) for _, t in items], STAMP)})


def test_an_imported_window_is_merged_and_emitted_when_its_imported_timer_fires(
        env: BackendEnv) -> None:  # noqa: F811 - fixture
    task = Partition(env, ("timestamp", "timestamp"))
    plan = window_totals()
    spark_state = pa.table({"start": pa.array([at(0)], STAMP), "end": pa.array([at(10)], STAMP),
                            buffer_column(0): [3], buffer_column(1): [30]})
    assert task.run(AggregationImporter(plan), spark_state, WINDOW, NOTHING, 0) == []
    more = pa.table({"start": pa.array([at(0)], STAMP), "end": pa.array([at(10)], STAMP),
                     "v": pa.array([5], pa.int64())})
    assert task.run(AggregationProcessor(plan), more, WINDOW, TOTALS, 5) == []
    # the window was not new to the step, so only the imported timer closes it
    assert task.run(AggregationProcessor(plan), more.slice(0, 0), WINDOW, TOTALS, 10) == [
        {"window": {"start": at(0), "end": at(10)}, "count": 4, "total": 35}]


def test_imported_seen_keys_drop_their_rows_forever(
        env: BackendEnv) -> None:  # noqa: F811 - fixture
    plan = DedupPlan(("k",), ("k", "at"), "at")
    task = Partition(env, ("string",))
    assert task.run(DedupImporter(plan), pa.table({"k": ["a"]}), ("k",), NOTHING, 0) == []
    assert task.run(DeduplicationProcessor(plan), rows(("a", 500), ("b", 500)), ("k",), ROWS,
                    400) == [{"k": "b", "at": at(500)}]


def test_an_imported_entry_within_the_watermark_lives_until_sparks_expiry(
        env: BackendEnv) -> None:  # noqa: F811 - fixture
    plan = DedupPlan(("k",), ("k", "at"), "at", within_watermark=True, delay_ms=10_000)
    task = Partition(env, ("string",))
    spark_state: Any = pa.table({"k": ["a"], EXPIRES: pa.array([11_000_000], pa.int64())})
    assert task.run(DedupImporter(plan), spark_state, ("k",), NOTHING, 0) == []
    dedup = DeduplicationProcessor(plan)
    # Spark's entry expires at 11 s: at watermark 11 it still drops this batch's row, then goes
    assert task.run(dedup, rows(("a", 9)), ("k",), ROWS, 11) == []
    assert task.run(dedup, rows(("a", 12)), ("k",), ROWS, 11) == [{"k": "a", "at": at(12)}]
