"""pyspark-dstl: a changelog state backend for PySpark Structured Streaming.

The public facade. The streaming API needs pyspark (the `spark` extra), so its names load on
first use; `import pyspark_dstl` alone does not import pyspark.

    from pyspark_dstl import StatefulProcessor, stateful

`DefaultSource` is the state reader: PySpark 4.3 registers the `DefaultSource` of installed
top-level packages named `pyspark_*`, so `spark.read.format("dstl-state")` works by name.
"""

from __future__ import annotations

import importlib
from typing import Any

from pyspark_dstl.backend.errors import CheckpointHeldError, FencedError
from pyspark_dstl.core.errors import ConfigError, DstlError

_SPARK_NAMES = {
    "BatchProgress": "pyspark_dstl.backend.spark",
    "DstlConf": "pyspark_dstl.backend.spark",
    "ExpiredTimers": "pyspark_dstl.backend.spark",
    "TimerError": "pyspark_dstl.backend.spark",
    "StatefulProcessor": "pyspark_dstl.backend.spark",
    "StatefulProcessorHandle": "pyspark_dstl.backend.spark",
    "StatefulStream": "pyspark_dstl.backend.spark",
    "VectorizedStatefulProcessor": "pyspark_dstl.backend.spark",
    "ValueState": "pyspark_dstl.backend.spark",
    "ListState": "pyspark_dstl.backend.spark",
    "MapState": "pyspark_dstl.backend.spark",
    "stateful": "pyspark_dstl.backend.spark",
    "StatefulQuery": "pyspark_dstl.backend.spark",
    "StatefulTaskError": "pyspark_dstl.backend.spark",
    "observed_state_metrics": "pyspark_dstl.backend.spark",
    "read_state": "pyspark_dstl.backend.spark",
    "register_state_reader": "pyspark_dstl.backend.spark",
    "DefaultSource": "pyspark_dstl.backend.spark.sources.state_reader",
    "install": "pyspark_dstl.backend.spark.dropin.switch",
    "uninstall": "pyspark_dstl.backend.spark.dropin.switch",
    "installed": "pyspark_dstl.backend.spark.dropin.switch",
    "StatefulDataFrame": "pyspark_dstl.backend.spark.dropin.frame",
    "StatefulStreamWriter": "pyspark_dstl.backend.spark.dropin.writer",
    "DropInUsageError": "pyspark_dstl.backend.spark.errors",
    "StateEncodingError": "pyspark_dstl.backend.spark.errors",
    "StateDecodingError": "pyspark_dstl.backend.spark.errors",
    "StateVariableError": "pyspark_dstl.backend.spark.errors",
    "PartitionCountError": "pyspark_dstl.backend.spark.errors",
    "RescaleError": "pyspark_dstl.backend.ops.rescale",
    "CommitValidationError": "pyspark_dstl.backend.spark.errors",
    "OutputSchemaError": "pyspark_dstl.backend.spark.errors",
    "ImportStateError": "pyspark_dstl.backend.spark.dropin.spark_checkpoint",
    "DeletedStateError": "pyspark_dstl.backend.spark.compat.state",
    "import_state": "pyspark_dstl.backend.spark.dropin.import_state",
}
_ALIASES = {"DefaultSource": "DstlStateDataSource"}


def __getattr__(name: str) -> Any:
    module = _SPARK_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'pyspark_dstl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _ALIASES.get(name, name))
    globals()[name] = value
    return value


__all__ = ["CheckpointHeldError", "ConfigError", "DstlError", "FencedError",
           *sorted(_SPARK_NAMES)]
