"""The stateful job of benchmark 8 (benchmarks/spark_output.py), importable by executors.

A stateful map whose output is as large as its input: every input row comes out with the
running count of its key at that row (the key's stored count plus its rank within the batch).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from pyspark_dstl.spark import StatefulProcessorHandle, VectorizedStatefulProcessor

INPUT_SCHEMA = "user string, v long"
OUTPUT_SCHEMA = "user string, v long, count long"


class RunningCountPerRow(VectorizedStatefulProcessor):
    """One bulk read and one bulk write per partition; one output row per input row."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count")

    def handle_batch(self, batch: Any) -> Iterator[pa.Table]:
        before = np.asarray(self.count.get_many(batch.keys, 0), dtype=np.int64)
        self.count.update_many(batch.keys, (before + batch.counts).tolist())
        groups = batch.group_ids
        rank = np.arange(batch.num_rows, dtype=np.int64) - batch.offsets[groups] + 1
        yield pa.table({"user": batch.table.column("user"), "v": batch.table.column("v"),
                        "count": pa.array(before[groups] + rank)})
