"""Drives a processor over one partition's batch: per key (slices of one frame) or vectorized."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from pyspark_dstl.backend.spark.grouping import KeyedBatch
from pyspark_dstl.backend.spark.output import OutputCollector
from pyspark_dstl.backend.spark.processor import (
    AnyProcessor,
    StatefulProcessor,
    StatefulProcessorHandle,
    VectorizedStatefulProcessor,
)
from pyspark_dstl.backend.spark.state import KeyContext, StoreAccess
from pyspark_dstl.backend.spark.task_errors import note_key


def run_processor(processor: AnyProcessor, store: StoreAccess, table: pa.Table,
                  key_columns: tuple[str, ...], output_schema: pa.Schema, *, batch_id: int,
                  partition_id: int, now_ms: int) -> tuple[pa.Table, int]:
    """(output rows, number of distinct keys) of one partition's micro-batch."""
    batch = KeyedBatch(table, key_columns)
    context = KeyContext(now_ms)
    handle = StatefulProcessorHandle(store, context, batch_id, partition_id)
    collector = OutputCollector(output_schema, type(processor).__name__)
    processor.init(handle)
    if isinstance(processor, VectorizedStatefulProcessor):
        _collect(collector, processor.handle_batch(batch))
    elif isinstance(processor, StatefulProcessor):
        encoded = batch.keys.encoded
        context.batch_keys = encoded
        handle_rows = processor.handle_input_rows
        key: Any = None
        try:
            for index, key in enumerate(batch.keys):
                context.current = encoded[index]
                _collect(collector, handle_rows(key, iter((batch.rows_of(index),))))
        except Exception as exc:
            note_key(exc, key_columns, key)
            raise
        context.current = None
    else:
        raise TypeError(f"{type(processor).__name__} is neither a StatefulProcessor nor a "
                        f"VectorizedStatefulProcessor")
    return collector.finish(), len(batch)


def _collect(collector: OutputCollector, items: Iterable[Any] | None) -> None:
    if items is None:
        return
    add = collector.add
    for item in items:
        add(item)
