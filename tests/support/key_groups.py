"""Processors and store readers of the key group tests (executors import processors by name)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.lineage.commit_entry import CommitEntry
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.spark import (
    StatefulProcessor,
    StatefulProcessorHandle,
    VectorizedStatefulProcessor,
)

FAR_MS = 1 << 50  # a timer expiry no test batch reaches
OUTPUT_SCHEMA = "rows long"


class ProbeProcessor(StatefulProcessor):
    """Per key: a value, a map entry and a timer, all stored under the batch's key bytes."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.count = handle.get_value_state("count")
        self.seen = handle.get_map_state("seen")

    def handle_input_rows(self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame]
                          ) -> Iterator[tuple[int]]:
        total = sum(len(frame) for frame in rows)
        self.count.update(total)
        self.seen.update_value("x", total)
        self.handle.register_timer(FAR_MS)
        yield (total,)


class PassedKeysProcessor(VectorizedStatefulProcessor):
    """Writes the batch's keys (grouped by Spark) to "batch" and the same keys passed as plain
    tuples (grouped in Python) to "passed", and registers a timer per passed key."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.batch = handle.get_value_state("batch")
        self.passed = handle.get_value_state("passed")

    def handle_batch(self, batch: Any) -> Iterator[pd.DataFrame]:
        counts = [int(c) for c in batch.counts]
        self.batch.update_many(batch.keys, counts)
        tuples = [tuple(key) for key in batch.keys]
        self.passed.update_many(tuples, counts)
        self.handle.register_timers(tuples, [FAR_MS] * len(tuples))
        yield pd.DataFrame({"rows": counts})


def stored_keys(checkpoint_url: str, local_dir: str, entry: CommitEntry,
                operator: str = "stateful") -> dict[int, dict[str, list[bytes]]]:
    """Per partition of `entry`, the stored keys of every column family."""
    found: dict[int, dict[str, list[bytes]]] = {}
    with StateBackend(BackendSettings(local_dir=local_dir)) as backend:
        for partition, info in sorted(entry.operators[operator].stores.items()):
            store = backend.provider(checkpoint_url, operator, partition).get_store(
                info.version, info)
            try:
                found[partition] = {cf: [key for key, _ in store.iterator(cf)]
                                    for cf in store.column_families()}
            finally:
                store.abort()
    return found
