"""Structured Streaming on the changelog state backend (the only package importing pyspark).

    from pyspark_dstl.backend.spark import stateful, StatefulProcessor

    query = (stateful(events).group_by("user")
             .process(CountProcessor(), "user string, count long", checkpoint=path)
             .foreach_batch(sink).start(trigger={"availableNow": True}))
"""

from pyspark_dstl.backend.spark.conf import DstlConf, QueryOptions
from pyspark_dstl.backend.spark.errors import (
    CommitValidationError,
    DstlSparkError,
    OutputSchemaError,
    PartitionCountError,
    PartitioningError,
    StateDecodingError,
    StateEncodingError,
    StateVariableError,
    TimerError,
)
from pyspark_dstl.backend.spark.grouping import KeyedBatch, Keys
from pyspark_dstl.backend.spark.operator import (
    BatchProgress,
    OperatorSpec,
    StageResult,
    StatefulOperator,
)
from pyspark_dstl.backend.spark.processor import (
    ExpiredTimers,
    StatefulProcessor,
    StatefulProcessorHandle,
    VectorizedStatefulProcessor,
)
from pyspark_dstl.backend.spark.progress import OBSERVATION, observed_state_metrics
from pyspark_dstl.backend.spark.query import StatefulStream, stateful
from pyspark_dstl.backend.spark.reader import DstlStateDataSource, read_state, register_state_reader
from pyspark_dstl.backend.spark.state import ListState, MapState, ValueState
from pyspark_dstl.backend.spark.task_errors import StatefulQuery, StatefulTaskError

__all__ = [
    "OBSERVATION",
    "BatchProgress",
    "CommitValidationError",
    "DstlConf",
    "DstlSparkError",
    "DstlStateDataSource",
    "ExpiredTimers",
    "KeyedBatch",
    "Keys",
    "ListState",
    "MapState",
    "OperatorSpec",
    "OutputSchemaError",
    "PartitionCountError",
    "PartitioningError",
    "QueryOptions",
    "StageResult",
    "StateDecodingError",
    "StateEncodingError",
    "StateVariableError",
    "StatefulOperator",
    "StatefulProcessor",
    "StatefulProcessorHandle",
    "StatefulQuery",
    "StatefulStream",
    "StatefulTaskError",
    "TimerError",
    "ValueState",
    "VectorizedStatefulProcessor",
    "observed_state_metrics",
    "read_state",
    "register_state_reader",
    "stateful",
]
