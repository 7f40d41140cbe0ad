"""Structured Streaming on the changelog state backend (the only package importing pyspark).

    from pyspark_dstl.backend.spark import stateful, StatefulProcessor

    query = (stateful(events).group_by("user")
             .process(CountProcessor(), "user string, count long", checkpoint=path)
             .foreach_batch(sink).start(trigger={"availableNow": True}))

The rooms: api/ (processors, handle, state), codec/, time/ (clock, watermark, timers, ticks),
driver/ (query, operator, lease, progress), task/ (what runs in a Spark task), sources/ (the
state reader, the progress source), compat/ (PySpark's processor API), dropin/ (the switch).
Names here load on first use, so a room's pyspark-free modules import without pyspark.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "BatchProgress": "pyspark_dstl.backend.spark.driver.operator",
    "CommitValidationError": "pyspark_dstl.backend.spark.errors",
    "DstlConf": "pyspark_dstl.backend.spark.options",
    "DstlSparkError": "pyspark_dstl.backend.spark.errors",
    "DstlStateDataSource": "pyspark_dstl.backend.spark.sources.state_reader",
    "ExpiredTimers": "pyspark_dstl.backend.spark.api.processor",
    "KeyedBatch": "pyspark_dstl.backend.spark.api.grouping",
    "Keys": "pyspark_dstl.backend.spark.api.grouping",
    "ListState": "pyspark_dstl.backend.spark.api.state",
    "MapState": "pyspark_dstl.backend.spark.api.state",
    "OBSERVATION": "pyspark_dstl.backend.spark.driver.progress",
    "observed_state_metrics": "pyspark_dstl.backend.spark.driver.progress",
    "PROGRESS_LOGGER": "pyspark_dstl.backend.spark.driver.progress",
    "OperatorSpec": "pyspark_dstl.backend.spark.driver.operator",
    "OutputSchemaError": "pyspark_dstl.backend.spark.errors",
    "PartitionCountError": "pyspark_dstl.backend.spark.errors",
    "PartitioningError": "pyspark_dstl.backend.spark.errors",
    "QueryOptions": "pyspark_dstl.backend.spark.options",
    "read_state": "pyspark_dstl.backend.spark.sources.state_reader",
    "register_state_reader": "pyspark_dstl.backend.spark.sources.state_reader",
    "StageResult": "pyspark_dstl.backend.spark.driver.operator",
    "StateDecodingError": "pyspark_dstl.backend.spark.errors",
    "StateEncodingError": "pyspark_dstl.backend.spark.errors",
    "StateSchemaError": "pyspark_dstl.backend.spark.errors",
    "stateful": "pyspark_dstl.backend.spark.driver.query",
    "StatefulOperator": "pyspark_dstl.backend.spark.driver.operator",
    "StatefulProcessor": "pyspark_dstl.backend.spark.api.processor",
    "StatefulProcessorHandle": "pyspark_dstl.backend.spark.api.processor",
    "StatefulQuery": "pyspark_dstl.backend.spark.driver.handle",
    "StatefulStream": "pyspark_dstl.backend.spark.driver.query",
    "StatefulTaskError": "pyspark_dstl.backend.spark.task.failures",
    "StateVariableError": "pyspark_dstl.backend.spark.errors",
    "TimerError": "pyspark_dstl.backend.spark.errors",
    "ValueState": "pyspark_dstl.backend.spark.api.state",
    "VectorizedStatefulProcessor": "pyspark_dstl.backend.spark.api.processor",
}


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = sorted(_NAMES)
