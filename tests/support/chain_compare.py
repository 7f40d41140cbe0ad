"""A chain of stateful steps run by PySpark's own operators and by this backend (the switch),
in one session, on the same input, compared batch by batch.

The input is written one JSON file at a time (`STEPS`, times in seconds after the epoch) and
the query processes each file before the next one is written (`processAllAvailable`), so both
engines see the same batches: a data batch per file and, when the watermark moved, a batch
without data. The watermark delay is 10 seconds; some rows of steps 2 and 4 are at or before
the watermark for late events and are dropped by the first step. After `restart_after` the
query is stopped and started again on its checkpoint. Rows are compared as sorted tuples per
batch id, values, nulls and batch ids exactly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.tws_compare import PYSPARK_STATE_SETTINGS, session_conf, sorted_rows

INPUT_SCHEMA = "k string, v int, ts timestamp"
WATERMARK_DELAY = "10 seconds"
STEPS: tuple[tuple[tuple[str, int, int], ...], ...] = (
    (("a", 1, 1), ("b", 2, 4), ("c", 3, 12)),
    (("d", 4, 25), ("a", 5, 8)),
    (("a", 6, 9), ("e", 7, 14), ("b", 8, 16), ("f", 9, 30)),  # a@9, e@14 late
    (("g", 10, 31), ("a", 11, 45)),
    (("a", 12, 2), ("b", 13, 33), ("h", 14, 38)),  # a@2, b@33 late
    (("i", 15, 70),),
)
CHAIN_SETTINGS = {"spark.sql.shuffle.partitions": "2", "spark.dstl.query.logProgress": "false"}
Batches = dict[int, list[tuple[Any, ...]]]


@dataclass(frozen=True)
class ChainScenario:
    """`first`: the first step's processor (made fresh per run); `rows_api`: it runs through
    transformWithState (Rows) rather than transformWithStateInPandas; `build`: the chain after
    it, from the first step's result to what the sink gets."""

    name: str
    first: Callable[[], Any]
    build: Callable[[Any], Any]
    output_mode: str = "append"
    rows_api: bool = False
    restart_after: int | None = 2
    first_output: str = "k string, v long, at timestamp, tag string"


def timestamp(seconds: int) -> str:
    return f"1970-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}Z"


def write_step(directory: Path, index: int, rows: tuple[tuple[str, int, int], ...]) -> None:
    """Step `index` as one JSON file, renamed into place (the file source never sees half a
    file) with a modification time after every earlier step's."""
    directory.mkdir(parents=True, exist_ok=True)
    staging = directory.parent / f".{directory.name}-staging"
    staging.mkdir(exist_ok=True)
    temporary = staging / f"step-{index:03d}.json"
    temporary.write_text("".join(json.dumps({"k": k, "v": v, "ts": timestamp(t)}) + "\n"
                                 for k, v, t in rows))
    stamp = 1_000_000 + index
    os.utime(temporary, (stamp, stamp))
    os.rename(temporary, directory / temporary.name)


@contextmanager
def engine_settings(spark: Any, engine: str) -> Iterator[None]:
    """PySpark's operators need the RocksDB provider; the switch is on only for "dropin"."""
    import pyspark_dstl

    with session_conf(spark, CHAIN_SETTINGS):
        if engine == "pyspark":
            was = pyspark_dstl.installed()
            pyspark_dstl.uninstall()
            try:
                with session_conf(spark, PYSPARK_STATE_SETTINGS):
                    yield
            finally:
                if was:
                    pyspark_dstl.install()
        else:
            was = pyspark_dstl.installed()
            pyspark_dstl.install()
            try:
                yield
            finally:
                if not was:
                    pyspark_dstl.uninstall()


def chain_query(spark: Any, scenario: ChainScenario, inputs: Path) -> Any:
    """The scenario's streaming DataFrame, built with PySpark's own calls."""
    source = (spark.readStream.format("json").schema(INPUT_SCHEMA)
              .option("maxFilesPerTrigger", 1).load(str(inputs))
              .withWatermark("ts", WATERMARK_DELAY))
    grouped = source.groupBy("k")
    call = grouped.transformWithState if scenario.rows_api else \
        grouped.transformWithStateInPandas
    first = call(statefulProcessor=scenario.first(), outputStructType=scenario.first_output,
                 outputMode="Append", timeMode="EventTime", eventTimeColumnName="at")
    return scenario.build(first)


def run_chain(spark: Any, scenario: ChainScenario, engine: str, root: Path,
              after_restart: dict[str, str] | None = None) -> Batches:
    """Every batch the sink received, by batch id (a replayed batch keeps its last rows);
    `after_restart`: session settings for the run after the restart (e.g. another count of
    shuffle partitions, which rescales the state)."""
    batches: Batches = {}

    def sink(frame: Any, batch_id: int) -> None:
        batches[batch_id] = sorted_rows(frame.collect())

    inputs, checkpoint = root / "in", root / f"checkpoint-{engine}"
    inputs.mkdir(parents=True, exist_ok=True)
    split = len(STEPS) if scenario.restart_after is None else scenario.restart_after + 1
    phases = [range(0, split), range(split, len(STEPS))]
    with engine_settings(spark, engine):
        for number, phase in enumerate(phases):
            if not len(phase):
                continue
            with session_conf(spark, after_restart if number and after_restart else {}):
                query = (chain_query(spark, scenario, inputs).writeStream
                         .outputMode(scenario.output_mode).foreachBatch(sink)
                         .option("checkpointLocation", str(checkpoint)).start())
                try:
                    for index in phase:
                        write_step(inputs, index, STEPS[index])
                        query.processAllAvailable()
                finally:
                    query.stop()
    return batches


def describe(expected: Batches, actual: Batches) -> str:
    lines = ["PySpark and this backend differ:"]
    for batch in sorted(set(expected) | set(actual)):
        if expected.get(batch) != actual.get(batch):
            lines.append(f"  batch {batch}:\n    pyspark: {expected.get(batch, 'no batch')}\n"
                         f"    dstl:    {actual.get(batch, 'no batch')}")
    return "\n".join(lines)


def compare_chain(spark: Any, scenario: ChainScenario, root: Path) -> tuple[Batches, Batches]:
    """(PySpark's batches, this backend's), each engine in its own directory."""
    expected = run_chain(spark, scenario, "pyspark", root / "pyspark")
    actual = run_chain(spark, scenario, "dropin", root / "dropin")
    return expected, actual
