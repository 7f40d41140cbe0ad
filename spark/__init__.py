"""Structured Streaming on the changelog state backend (the only package importing pyspark).

    from pyspark_dstl.spark import stateful, StatefulProcessor

    query = (stateful(events).group_by("user")
             .process(CountProcessor(), "user string, count long",
                      checkpoint_location=path)
             .foreach_batch(sink).start(trigger={"availableNow": True}))

The rooms, in the order data flows: switch/ (install(): PySpark's own calls routed here, the
stand-in frame, its writer and sinks), moves/ (state between Spark's operator and this backend),
builder/ (stateful(df)...process(...): the library's own entry and the started query),
driver/ (the driver's side of a running query: operator, commit, lease, progress, rescale),
stage/ (what runs in a Spark task), pyspark_api/ (PySpark's StatefulProcessor unchanged),
processors/ (the library's own processor API and state variables), readers/ (data sources that
read a checkpoint), keys/ (Spark's side of the key-group layout), codec/ (state values and their
schemas), time/ (clocks, watermark, timers, ticks).
Names here load on first use, so a room's pyspark-free modules import without pyspark.
"""

from __future__ import annotations

from typing import Any

from pyspark_dstl.core.lazy_names import load_lazy_name

_NAMES = {
    "BatchProgress": "pyspark_dstl.spark.driver.operator",
    "CommitValidationError": "pyspark_dstl.spark.spark_errors",
    "DstlSettings": "pyspark_dstl.spark.query_settings",
    "DstlSparkError": "pyspark_dstl.spark.spark_errors",
    "DstlStateDataSource": "pyspark_dstl.spark.readers.state_reader",
    "ExpiredTimers": "pyspark_dstl.spark.processors.processor",
    "KeyedBatch": "pyspark_dstl.spark.keys.keyed_batch",
    "Keys": "pyspark_dstl.spark.keys.keyed_batch",
    "ListState": "pyspark_dstl.spark.processors.state_variables",
    "MapState": "pyspark_dstl.spark.processors.state_variables",
    "OBSERVATION": "pyspark_dstl.spark.driver.progress",
    "observed_state_metrics": "pyspark_dstl.spark.driver.progress",
    "PROGRESS_JSON_LOGGER": "pyspark_dstl.spark.driver.progress",
    "PROGRESS_LOGGER": "pyspark_dstl.spark.driver.progress",
    "OperatorSpec": "pyspark_dstl.spark.driver.operator",
    "OutputSchemaError": "pyspark_dstl.spark.spark_errors",
    "PartitionCountError": "pyspark_dstl.spark.spark_errors",
    "PartitioningError": "pyspark_dstl.spark.spark_errors",
    "QuerySettings": "pyspark_dstl.spark.query_settings",
    "read_state": "pyspark_dstl.spark.readers.state_reader",
    "register_state_reader": "pyspark_dstl.spark.readers.state_reader",
    "StageResult": "pyspark_dstl.spark.driver.operator",
    "StateDecodingError": "pyspark_dstl.spark.spark_errors",
    "StateEncodingError": "pyspark_dstl.spark.spark_errors",
    "StateSchemaError": "pyspark_dstl.spark.spark_errors",
    "stateful": "pyspark_dstl.spark.builder.stateful_stream",
    "StatefulOperator": "pyspark_dstl.spark.driver.operator",
    "StatefulProcessor": "pyspark_dstl.spark.processors.processor",
    "StatefulProcessorHandle": "pyspark_dstl.spark.processors.processor",
    "StatefulQuery": "pyspark_dstl.spark.builder.started_query",
    "StatefulStream": "pyspark_dstl.spark.builder.stateful_stream",
    "StatefulTaskError": "pyspark_dstl.spark.stage.failures",
    "StateVariableError": "pyspark_dstl.spark.spark_errors",
    "TimerError": "pyspark_dstl.spark.spark_errors",
    "ValueState": "pyspark_dstl.spark.processors.state_variables",
    "VectorizedStatefulProcessor": "pyspark_dstl.spark.processors.processor",
}


def __getattr__(name: str) -> Any:
    return load_lazy_name(__name__, _NAMES, name)


__all__ = sorted(_NAMES)
