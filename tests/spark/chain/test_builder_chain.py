"""The same chains through the library's builder: `stateful(df).group_by(...)` with PySpark's
processor or the library's own, then `.group_by(...)`, `.drop_duplicates(...)`,
`.transform(...)` and `.output_mode(...)` on the returned stream."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from pyspark_dstl import ChainedStepError, VectorizedStatefulProcessor, stateful
from tests.support.chain_compare import (
    INPUT_SCHEMA,
    STEPS,
    WATERMARK_DELAY,
    ChainScenario,
    run_chain,
    write_step,
)
from tests.support.chain_processors import RELAY_SCHEMA, RelayWithCloser

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


class Forward(VectorizedStatefulProcessor):
    """The library's own processor: forwards every row, its event time as `at`."""

    def handle_batch(self, batch: Any) -> Iterator[pa.Table]:
        table = batch.table
        yield pa.table({"k": table.column("k"), "v": table.column("v").cast(pa.int64()),
                        "at": table.column("ts")})


def source(spark: Any, inputs: Path) -> Any:
    inputs.mkdir(parents=True, exist_ok=True)
    return (spark.readStream.format("json").schema(INPUT_SCHEMA)
            .option("maxFilesPerTrigger", 1).load(str(inputs))
            .withWatermark("ts", WATERMARK_DELAY))


def run(stream: Any, inputs: Path) -> dict[int, list[tuple[Any, ...]]]:
    batches: dict[int, list[tuple[Any, ...]]] = {}

    def sink(frame: Any, batch_id: int) -> None:
        batches[batch_id] = sorted(tuple(row) for row in frame.collect())

    query = stream.foreach_batch(sink).start()
    try:
        for index, rows in enumerate(STEPS):
            write_step(inputs, index, rows)
            query.processAllAvailable()
    finally:
        query.stop()
    return batches


def test_a_chain_on_the_builder_gives_the_switchs_batches(spark: Any, tmp_path: Path) -> None:
    with_switch = run_chain(spark, ChainScenario(
        "switch", RelayWithCloser, lambda first: first.groupBy(F.window("at", "10 seconds"))
        .agg(F.count("*").alias("rows")).withColumn("twice", F.col("rows") * 2),
        restart_after=None), "dropin", tmp_path / "switch")
    first = stateful(source(spark, tmp_path / "in")).group_by("k").transformWithStateInPandas(
        RelayWithCloser(), RELAY_SCHEMA, "Append", "EventTime", eventTimeColumnName="at",
        checkpoint_location=str(tmp_path / "checkpoint"), settings={"query.logProgress": "false"},
        partitions=2)
    counts = (first.group_by(F.window("at", "10 seconds")).agg(F.count("*").alias("rows"))
              .transform(lambda frame: frame.withColumn("twice", F.col("rows") * 2)))
    assert run(counts, tmp_path / "in") == with_switch


def test_the_librarys_own_processor_starts_a_chain_with_output_event_time(
        spark: Any, tmp_path: Path) -> None:
    first = stateful(source(spark, tmp_path / "in")).group_by("k").process(
        Forward(), "k string, v long, at timestamp",
        checkpoint_location=str(tmp_path / "checkpoint"),
        time_mode="event_time", output_event_time="at", settings={"query.logProgress": "false"},
        partitions=2)
    totals = first.drop_duplicates(["k", "at"]).group_by("k").agg(
        F.sum("v").alias("total")).output_mode("update")
    batches = run(totals, tmp_path / "in")
    newest: dict[str, int] = {}
    for rows in batches.values():
        newest.update({k: total for k, total in rows})
    accepted = [(k, v) for index, rows in enumerate(STEPS) for k, v, t in rows
                if (index, k, t) not in {(2, "a", 9), (2, "e", 14), (4, "a", 2), (4, "b", 33)}]
    expected: dict[str, int] = {}
    for k, v in accepted:
        expected[k] = expected.get(k, 0) + v
    assert newest == expected


def test_output_mode_rules_hold_on_the_builder_when_the_query_starts(spark: Any,
                                                                     tmp_path: Path) -> None:
    first = stateful(source(spark, tmp_path / "in")).group_by("k").process(
        Forward(), "k string, v long, at timestamp",
        checkpoint_location=str(tmp_path / "checkpoint"),
        time_mode="event_time", output_event_time="at")
    counts = first.group_by("k").count()  # no event time in the key: not in append mode
    with pytest.raises(ChainedStepError, match=r"Invalid streaming output mode: append"):
        counts.foreach_batch(lambda frame, batch: None).start()
