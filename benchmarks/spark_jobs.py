"""The keyed running count, written four ways, for benchmark 6 (benchmarks/spark_e2e.py).

They live in an importable module (not in the script run as __main__) so executors load them by
name. Every variant emits (user, count) for each key of the batch, with the count after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming.stateful_processor import StatefulProcessor as SparkProcessor
from pyspark.sql.types import LongType, StructField, StructType

from pyspark_dstl.spark import (
    StatefulProcessor,
    StatefulProcessorHandle,
    VectorizedStatefulProcessor,
)

OUTPUT_SCHEMA = "user string, count long"
INPUT_SCHEMA = "user string, v long"
STATE_SCHEMA = "count long"
COUNT_STATE = StructType([StructField("count", LongType(), True)])


class PerKeyCount(StatefulProcessor):
    """(a) this library, per-key API."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count")

    def handle_input_rows(self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame]
                          ) -> Iterator[tuple[Any, ...]]:
        total = self.count.get(0) + sum(len(frame) for frame in rows)
        self.count.update(total)
        yield (key[0], total)


class VectorizedCount(VectorizedStatefulProcessor):
    """(a') this library, vectorized API: one bulk read and one bulk write per partition."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count")

    def handle_batch(self, batch: Any) -> Iterator[pa.Table]:
        totals = np.asarray(self.count.get_many(batch.keys, 0), dtype=np.int64) + batch.counts
        self.count.update_many(batch.keys, totals.tolist())
        yield pa.table({"user": batch.key_table.column(0), "count": pa.array(totals)})


def group_state_count(key: tuple[Any, ...], frames: Iterator[pd.DataFrame],
                      state: Any) -> Iterator[pd.DataFrame]:
    """(b) PySpark's applyInPandasWithState."""
    total = int(state.get[0]) if state.exists else 0
    total += sum(len(frame) for frame in frames)
    state.update((total,))
    yield pd.DataFrame({"user": [key[0]], "count": [total]})


class TwsCount(SparkProcessor):
    """(c) PySpark's transformWithStateInPandas; its state lives in the JVM's RocksDB."""

    def init(self, handle: Any) -> None:
        self.count = handle.getValueState("count", COUNT_STATE)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any
                        ) -> Iterator[pd.DataFrame]:
        total = int(self.count.get()[0]) if self.count.exists() else 0
        total += sum(len(frame) for frame in rows)
        self.count.update((total,))
        yield pd.DataFrame({"user": [key[0]], "count": [total]})

    def close(self) -> None:
        pass
