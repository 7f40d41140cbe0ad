"""A producer and a consumer of the change feed, each a process of its own so a test can kill
either at any moment:

    python -m tests.support.change_feed_jobs producer <inputs> <location>
    python -m tests.support.change_feed_jobs consumer <location> <checkpoint> <output>

The producer is PySpark's own query with the switch installed: per user, a map state of item
counts (tws_processors.ItemCountsProcessor: "-x" removes item x, "*" empties the map), over
the parquet files of <inputs>, one per batch, trigger availableNow. The consumer reads that
query's `items` change feed as a stream into Spark's parquet file sink at <output>, trigger
availableNow. Each prints "DONE" when its query ends. `mirror_of` folds the consumer's output
into the map state it mirrors; `state_of` reads the producer's state the way Spark's
`statestore` source shows it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tests.support.state_data import plain

ITEMS = "user string, item string"
FEED_NAME = "mirror"
PRODUCER_SETTINGS = {"spark.sql.shuffle.partitions": "3"}


def item_frames(count: int, rows: int, users: int, seed: int) -> list[pd.DataFrame]:
    """Batches of (user, item): mostly counts, some removals and some emptied maps."""
    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(count):
        items = [f"i{n}" for n in rng.integers(0, 8, rows)]
        marks = rng.random(rows)
        items = [("*" if mark < 0.03 else f"-{item}" if mark < 0.15 else item)
                 for item, mark in zip(items, marks, strict=True)]
        frames.append(pd.DataFrame({"user": [f"u{n}" for n in rng.integers(0, users, rows)],
                                    "item": items}))
    return frames


def producer(inputs: str, location: str) -> None:
    import pyspark_dstl
    from tests.support.compat_runs import input_stream
    from tests.support.spark import build_session
    from tests.support.tws_processors import ItemCountsProcessor

    spark = build_session(master="local[2]", app_name="change-feed-producer",
                          extra={"spark.sql.shuffle.partitions": "3"})
    pyspark_dstl.install()
    counts = (input_stream(spark, Path(inputs), ITEMS).groupBy("user")
              .transformWithStateInPandas(ItemCountsProcessor(), ItemCountsProcessor.OUTPUT,
                                          "Update", "None"))
    query = (counts.writeStream.foreachBatch(lambda df, batch_id: None)
             .option("checkpointLocation", location).trigger(availableNow=True).start())
    query.awaitTermination()
    print("DONE", flush=True)
    spark.stop()


def consumer(location: str, checkpoint: str, output: str) -> None:
    from tests.support.spark import build_session

    spark = build_session(master="local[2]", app_name="change-feed-consumer")
    changes = (spark.readStream.format("dstl-changes").option("stateVarName", "items")
               .option("feedName", FEED_NAME).load(location))
    query = (changes.writeStream.format("parquet").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start(output))
    query.awaitTermination()
    print("DONE", flush=True)
    spark.stop()


def run_producer(spark: Any, inputs: Path, location: Path,
                 settings: dict[str, str] | None = None) -> None:
    """PySpark's own query with the switch on: item counts per user, every input file."""
    import pyspark_dstl
    from tests.support.compat_runs import input_stream
    from tests.support.tws_compare import session_conf
    from tests.support.tws_processors import ItemCountsProcessor

    with session_conf(spark, {**PRODUCER_SETTINGS, **(settings or {})}):
        pyspark_dstl.install()
        try:
            counts = (input_stream(spark, inputs, ITEMS).groupBy("user")
                      .transformWithStateInPandas(ItemCountsProcessor(),
                                                  ItemCountsProcessor.OUTPUT, "Update", "None"))
            query = (counts.writeStream.foreachBatch(lambda df, batch_id: None)
                     .option("checkpointLocation", str(location))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            assert query.exception() is None
        finally:
            pyspark_dstl.uninstall()


def run_consumer(spark: Any, location: Path, checkpoint: Path,
                 batches: dict[int, list[Any]], fail_at: int | None = None,
                 **options: Any) -> None:
    """The feed of the `items` variable into a sink that keeps each consumer batch's rows (a
    replay replaces), trigger availableNow, in this process. `fail_at`: the sink fails that
    consumer batch (after its offsets are logged, before its commit), and the query with it."""
    reader = (spark.readStream.format("dstl-changes").option("stateVarName", "items")
              .option("feedName", FEED_NAME))
    for key, value in options.items():
        reader = reader.option(key, value)

    def keep(df: Any, batch_id: int) -> None:
        if batch_id == fail_at:
            raise RuntimeError(f"the sink fails consumer batch {batch_id}")
        batches[batch_id] = [plain(row) for row in df.collect()]

    query = (reader.load(str(location)).writeStream.foreachBatch(keep)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()  # raises the query's failure


def everything(batches: dict[int, list[Any]]) -> list[Any]:
    """Every row the consumer's batches received, in a fixed order."""
    return sorted((row for rows in batches.values() for row in rows), key=json.dumps)


def mirror_of(rows: Iterable[Any]) -> dict[tuple[str, str], int]:
    """The map state the change rows describe: in batch order, an update sets an entry, a
    delete removes it (each key's rows of one batch are its last write, in any order)."""
    mirror: dict[tuple[str, str], int] = {}
    for row in sorted(rows, key=lambda r: r["batch_id"]):
        entry = (row["key"]["user"], row["user_map_key"]["item"])
        if row["change_type"] == "update":
            mirror[entry] = row["user_map_value"]["count"]
        else:
            mirror.pop(entry, None)
    return mirror


def state_of(spark: Any, location: str) -> dict[tuple[str, str], int]:
    """The producer's map state at its newest batch, through Spark's `statestore` source."""
    df = (spark.read.format("dstl-statestore").option("stateVarName", "items")
          .load(location))
    return {(r["key"]["user"], r["user_map_key"]["item"]): r["user_map_value"]["count"]
            for r in df.collect()}


def main(argv: list[str]) -> None:
    if argv[0] == "producer":
        producer(*argv[1:3])
    elif argv[0] == "consumer":
        consumer(*argv[1:4])
    else:
        raise SystemExit(f"unknown job {argv[0]!r}; " + json.dumps(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
