"""The first step of benchmark 12's chained query (benchmarks/spark_chain.py), two ways.

Both keep a running count per key and emit, per key of the batch, (user, count, at): the count
after the batch and the key's newest event time in it, which the windowed count after them
groups on (transformWithState's eventTimeColumnName). They live in an importable module so
executors load them by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.streaming.stateful_processor import StatefulProcessor as SparkProcessor
from pyspark.sql.types import LongType, StructField, StructType

from pyspark_dstl.spark import StatefulProcessorHandle, VectorizedStatefulProcessor

INPUT_SCHEMA = "user string, v long, ts timestamp"
FIRST_OUTPUT = "user string, count long, at timestamp"
COUNT_STATE = StructType([StructField("count", LongType(), True)])


class TwsNewest(SparkProcessor):
    """PySpark's transformWithStateInPandas API (on the switch, and on Spark's own operator)."""

    def init(self, handle: Any) -> None:
        self.count = handle.getValueState("count", COUNT_STATE)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any
                        ) -> Iterator[pd.DataFrame]:
        total = int(self.count.get()[0]) if self.count.exists() else 0
        newest = None
        for frame in rows:
            total += len(frame)
            latest = frame["ts"].max()
            newest = latest if newest is None else max(newest, latest)
        self.count.update((total,))
        yield pd.DataFrame({"user": [key[0]], "count": [total], "at": [newest]})

    def close(self) -> None:
        pass


class VectorizedNewest(VectorizedStatefulProcessor):
    """This library's vectorized API: one bulk read and one bulk write per partition."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count")

    def handle_batch(self, batch: Any) -> Iterator[pa.Table]:
        totals = np.asarray(self.count.get_many(batch.keys, 0), dtype=np.int64) + batch.counts
        self.count.update_many(batch.keys, totals.tolist())
        times = batch.table.column("ts").combine_chunks()
        micros = np.asarray(pc.cast(times, pa.int64()).to_numpy(zero_copy_only=False))
        newest = np.maximum.reduceat(micros, batch.offsets[:-1]) if len(batch) else micros[:0]
        yield pa.table({"user": batch.key_table.column(0), "count": pa.array(totals),
                        "at": pa.array(newest, pa.int64()).cast(times.type)})
