"""pyspark-dstl: a changelog state backend for PySpark Structured Streaming.

The public facade. The streaming API needs pyspark (the `spark` extra), so its names load on
first use; `import pyspark_dstl` alone does not import pyspark. Every error the library raises
is exported here (all derive from DstlError), so users catch them from one place.

    from pyspark_dstl import StatefulProcessor, stateful

`DefaultSource` is the state reader: PySpark 4.3 registers the `DefaultSource` of installed
top-level packages named `pyspark_*`, so `spark.read.format("dstl-state")` works by name.
"""

from __future__ import annotations

import importlib
from typing import Any

from pyspark_dstl.backend.errors import CheckpointHeldError, FencedError
from pyspark_dstl.core.errors import ConfigError, DstlError

_LAZY_NAMES = {
    "BackendError": "pyspark_dstl.backend.errors",
    "BadMagicError": "pyspark_dstl.changelog.errors",
    "BatchProgress": "pyspark_dstl.backend.spark",
    "ChangelogError": "pyspark_dstl.changelog.errors",
    "ChecksumMismatchError": "pyspark_dstl.changelog.errors",
    "CommitLogCorruptError": "pyspark_dstl.backend.errors",
    "CommitLogError": "pyspark_dstl.backend.errors",
    "CommitValidationError": "pyspark_dstl.backend.spark.errors",
    "CorruptCheckpointError": "pyspark_dstl.backend.errors",
    "DefaultSource": "pyspark_dstl.backend.spark.sources.state_reader",
    "DeletedStateError": "pyspark_dstl.backend.spark.compat.state",
    "DropInUsageError": "pyspark_dstl.backend.spark.errors",
    "DstlConf": "pyspark_dstl.backend.spark",
    "DstlSparkError": "pyspark_dstl.backend.spark.errors",
    "EngineWriteError": "pyspark_dstl.backend.store.engine_writer",
    "ExpiredTimers": "pyspark_dstl.backend.spark",
    "FormatError": "pyspark_dstl.changelog.errors",
    "HandleError": "pyspark_dstl.changelog.errors",
    "HandleFormatError": "pyspark_dstl.materializer.handle",
    "import_state": "pyspark_dstl.backend.spark.dropin.import_state",
    "ImportStateError": "pyspark_dstl.backend.spark.dropin.spark_checkpoint",
    "IncompleteSparkCheckpointError": "pyspark_dstl.backend.spark.dropin.spark_checkpoint",
    "install": "pyspark_dstl.backend.spark.dropin.switch",
    "installed": "pyspark_dstl.backend.spark.dropin.switch",
    "KillPointError": "pyspark_dstl.backend.faults",
    "LineageError": "pyspark_dstl.backend.errors",
    "ListState": "pyspark_dstl.backend.spark",
    "LoopClosedError": "pyspark_dstl.core.errors",
    "LoopUsageError": "pyspark_dstl.core.errors",
    "ManifestError": "pyspark_dstl.materializer.errors",
    "ManifestExistsError": "pyspark_dstl.materializer.errors",
    "MapState": "pyspark_dstl.backend.spark",
    "MaterializationFailedError": "pyspark_dstl.materializer.errors",
    "MaterializerClosedError": "pyspark_dstl.materializer.errors",
    "MaterializerError": "pyspark_dstl.materializer.errors",
    "NoCheckpointError": "pyspark_dstl.backend.ops.root",
    "NonAtomicStorageWarning": "pyspark_dstl.changelog.storage.fsspec_store",
    "NoTransformWithStateError": "pyspark_dstl.backend.spark.dropin.spark_checkpoint",
    "ObjectExistsError": "pyspark_dstl.changelog.errors",
    "ObjectNotFoundError": "pyspark_dstl.changelog.errors",
    "observed_state_metrics": "pyspark_dstl.backend.spark",
    "OutputFileError": "pyspark_dstl.backend.spark.errors",
    "OutputSchemaError": "pyspark_dstl.backend.spark.errors",
    "PartitionCountError": "pyspark_dstl.backend.spark.errors",
    "PartitioningError": "pyspark_dstl.backend.spark.errors",
    "PermanentStorageError": "pyspark_dstl.changelog.errors",
    "ProcessorMismatchError": "pyspark_dstl.backend.spark.dropin.spark_checkpoint",
    "PROGRESS_LOGGER": "pyspark_dstl.backend.spark",
    "ProviderError": "pyspark_dstl.backend.errors",
    "read_state": "pyspark_dstl.backend.spark",
    "register_state_reader": "pyspark_dstl.backend.spark",
    "SnapshotCorruptError": "pyspark_dstl.materializer.errors",
    "SnapshotNotFoundError": "pyspark_dstl.materializer.errors",
    "SnapshotRequestError": "pyspark_dstl.materializer.errors",
    "SnapshotUploadError": "pyspark_dstl.materializer.errors",
    "SparkCheckpointError": "pyspark_dstl.backend.spark.dropin.spark_checkpoint",
    "SqnError": "pyspark_dstl.changelog.errors",
    "StateDecodingError": "pyspark_dstl.backend.spark.errors",
    "StateEncodingError": "pyspark_dstl.backend.spark.errors",
    "stateful": "pyspark_dstl.backend.spark",
    "StatefulDataFrame": "pyspark_dstl.backend.spark.dropin.frame",
    "StatefulProcessor": "pyspark_dstl.backend.spark",
    "StatefulProcessorHandle": "pyspark_dstl.backend.spark",
    "StatefulQuery": "pyspark_dstl.backend.spark",
    "StatefulStream": "pyspark_dstl.backend.spark",
    "StatefulStreamWriter": "pyspark_dstl.backend.spark.dropin.writer",
    "StatefulTaskError": "pyspark_dstl.backend.spark",
    "StateStoreClosedError": "pyspark_dstl.backend.errors",
    "RescaleError": "pyspark_dstl.backend.ops.rescale",
    "StaleInstallWarning": "pyspark_dstl.backend.spark.sources.discovery",
    "StateSchemaError": "pyspark_dstl.backend.spark.errors",
    "StateVariableError": "pyspark_dstl.backend.spark.errors",
    "StorageError": "pyspark_dstl.changelog.errors",
    "StoreIdError": "pyspark_dstl.backend.errors",
    "StoreLockedError": "pyspark_dstl.backend.errors",
    "StoreNotRegisteredError": "pyspark_dstl.materializer.errors",
    "TargetNotEmptyError": "pyspark_dstl.backend.spark.dropin.spark_checkpoint",
    "TimerError": "pyspark_dstl.backend.spark",
    "TransientStorageError": "pyspark_dstl.changelog.errors",
    "TruncatedFileError": "pyspark_dstl.changelog.errors",
    "UncommittedAttemptError": "pyspark_dstl.backend.errors",
    "uninstall": "pyspark_dstl.backend.spark.dropin.switch",
    "UnsupportedStorageError": "pyspark_dstl.changelog.errors",
    "UnsupportedVersionError": "pyspark_dstl.changelog.errors",
    "UploadFailedError": "pyspark_dstl.changelog.errors",
    "ValueState": "pyspark_dstl.backend.spark",
    "VectorizedStatefulProcessor": "pyspark_dstl.backend.spark",
    "WriterClosedError": "pyspark_dstl.changelog.errors",
}
_ALIASES = {"DefaultSource": "DstlStateDataSource"}


def __getattr__(name: str) -> Any:
    module = _LAZY_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'pyspark_dstl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _ALIASES.get(name, name))
    globals()[name] = value
    return value


__all__ = ["CheckpointHeldError", "ConfigError", "DstlError", "FencedError",
           *sorted(_LAZY_NAMES)]
