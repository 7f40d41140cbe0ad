"""pyspark-dstl: a changelog state backend for PySpark Structured Streaming.

The public facade. The streaming API needs pyspark (the `spark` extra), so its names load on
first use; `import pyspark_dstl` alone does not import pyspark. Every error the library raises
is exported here (all derive from DstlError, every warning from DstlWarning), so users catch
or filter them from one place.

    from pyspark_dstl import StatefulProcessor, stateful

`DefaultSource` is the state reader: every supported PySpark registers the `DefaultSource` of
installed top-level packages named `pyspark_*`, so `spark.read.format("dstl-state")` works by
name.
"""

from __future__ import annotations

from typing import Any

from pyspark_dstl.core.errors import ConfigError, DstlError, DstlWarning
from pyspark_dstl.core.lazy_names import load_lazy_name

_LAZY_NAMES = {
    "BackendError": "pyspark_dstl.backend.backend_errors",
    "CheckpointHeldError": "pyspark_dstl.backend.backend_errors",
    "BadMagicError": "pyspark_dstl.changelog.changelog_errors",
    "BatchProgress": "pyspark_dstl.spark",
    "ChangeFeedError": "pyspark_dstl.spark.readers.change_feed",
    "AggregateOverflowError": "pyspark_dstl.spark.spark_errors",
    "ChainedStepError": "pyspark_dstl.spark.spark_errors",
    "ChainImportError": "pyspark_dstl.spark.moves.spark_checkpoint",
    "ChangelogError": "pyspark_dstl.changelog.changelog_errors",
    "ChecksumMismatchError": "pyspark_dstl.changelog.changelog_errors",
    "CommitLogCorruptError": "pyspark_dstl.backend.backend_errors",
    "CommitLogError": "pyspark_dstl.backend.backend_errors",
    "CommitValidationError": "pyspark_dstl.spark.spark_errors",
    "CorruptCheckpointError": "pyspark_dstl.backend.backend_errors",
    "DefaultSource": "pyspark_dstl.spark.readers.state_reader",
    "DeletedStateError": "pyspark_dstl.spark.pyspark_api.pyspark_state",
    "DropInUsageError": "pyspark_dstl.spark.spark_errors",
    "DstlSettings": "pyspark_dstl.spark",
    "DstlSparkError": "pyspark_dstl.spark.spark_errors",
    "EngineWriteError": "pyspark_dstl.backend.store.engine_writer",
    "ExpiredTimers": "pyspark_dstl.spark",
    "FencedError": "pyspark_dstl.backend.backend_errors",
    "export_state": "pyspark_dstl.spark.moves.export_state",
    "ExportStateError": "pyspark_dstl.spark.moves.export_state",
    "FormatError": "pyspark_dstl.changelog.changelog_errors",
    "HandleError": "pyspark_dstl.changelog.changelog_errors",
    "HandleFormatError": "pyspark_dstl.materializer.materialized_handle",
    "import_state": "pyspark_dstl.spark.moves.import_state",
    "ImportStateError": "pyspark_dstl.spark.moves.spark_checkpoint",
    "IncompleteSparkCheckpointError": "pyspark_dstl.spark.moves.spark_checkpoint",
    "install": "pyspark_dstl.spark.switch.switch",
    "installed": "pyspark_dstl.spark.switch.switch",
    "KillPointError": "pyspark_dstl.backend.faults",
    "LateOutputRowError": "pyspark_dstl.spark.spark_errors",
    "LineageError": "pyspark_dstl.backend.backend_errors",
    "ListState": "pyspark_dstl.spark",
    "LocationMovedError": "pyspark_dstl.spark.spark_errors",
    "LoopClosedError": "pyspark_dstl.core.errors",
    "LoopUsageError": "pyspark_dstl.core.errors",
    "ManifestError": "pyspark_dstl.materializer.materializer_errors",
    "ManifestExistsError": "pyspark_dstl.materializer.materializer_errors",
    "MapState": "pyspark_dstl.spark",
    "MaterializationFailedError": "pyspark_dstl.materializer.materializer_errors",
    "MaterializerClosedError": "pyspark_dstl.materializer.materializer_errors",
    "MaterializerError": "pyspark_dstl.materializer.materializer_errors",
    "MoveError": "pyspark_dstl.spark.spark_errors",
    "MoveRecordError": "pyspark_dstl.spark.spark_errors",
    "NoCheckpointError": "pyspark_dstl.backend.ops.root",
    "NonAtomicStorageWarning": "pyspark_dstl.changelog.changelog_errors",
    "NoTransformWithStateError": "pyspark_dstl.spark.moves.spark_checkpoint",
    "ObjectExistsError": "pyspark_dstl.changelog.changelog_errors",
    "ObjectNotFoundError": "pyspark_dstl.changelog.changelog_errors",
    "observed_state_metrics": "pyspark_dstl.spark",
    "OutputFileError": "pyspark_dstl.spark.spark_errors",
    "OutputSchemaError": "pyspark_dstl.spark.spark_errors",
    "PartitionCountError": "pyspark_dstl.spark.spark_errors",
    "PartitioningError": "pyspark_dstl.spark.spark_errors",
    "PermanentStorageError": "pyspark_dstl.changelog.changelog_errors",
    "ProcessorMismatchError": "pyspark_dstl.spark.moves.spark_checkpoint",
    "PROGRESS_JSON_LOGGER": "pyspark_dstl.spark",
    "PROGRESS_LOGGER": "pyspark_dstl.spark",
    "PySparkVersionAttributeError": "pyspark_dstl.spark.spark_errors",
    "PySparkVersionError": "pyspark_dstl.spark.spark_errors",
    "ProviderError": "pyspark_dstl.backend.backend_errors",
    "read_state": "pyspark_dstl.spark",
    "register_state_reader": "pyspark_dstl.spark",
    "register_storage": "pyspark_dstl.changelog.storage",
    "register_state_sources": "pyspark_dstl.spark.readers.routing",
    "SchemaRecordError": "pyspark_dstl.backend.backend_errors",
    "SnapshotCorruptError": "pyspark_dstl.materializer.materializer_errors",
    "SnapshotNotFoundError": "pyspark_dstl.materializer.materializer_errors",
    "SnapshotRequestError": "pyspark_dstl.materializer.materializer_errors",
    "SnapshotUploadError": "pyspark_dstl.materializer.materializer_errors",
    "SparkCheckpointError": "pyspark_dstl.spark.moves.spark_checkpoint",
    "SparkCheckpointHereError": "pyspark_dstl.spark.spark_errors",
    "SqnError": "pyspark_dstl.changelog.changelog_errors",
    "StateDataSourceError": "pyspark_dstl.spark.readers.state_data_errors",
    "StateDecodingError": "pyspark_dstl.spark.spark_errors",
    "StateEncodingError": "pyspark_dstl.spark.spark_errors",
    "stateful": "pyspark_dstl.spark",
    "StatefulDataFrame": "pyspark_dstl.spark.switch.frame",
    "StatefulProcessor": "pyspark_dstl.spark",
    "StatefulProcessorHandle": "pyspark_dstl.spark",
    "StatefulQuery": "pyspark_dstl.spark",
    "StatefulStream": "pyspark_dstl.spark",
    "StatefulStreamWriter": "pyspark_dstl.spark.switch.writer",
    "StatefulTaskError": "pyspark_dstl.spark",
    "Storage": "pyspark_dstl.changelog.storage",
    "StateStoreClosedError": "pyspark_dstl.backend.backend_errors",
    "RescaleError": "pyspark_dstl.backend.rescale.key_by_key",
    "StaleInstallWarning": "pyspark_dstl.spark.readers.discovery",
    "StateSchemaError": "pyspark_dstl.spark.spark_errors",
    "StateVariableError": "pyspark_dstl.spark.spark_errors",
    "StorageError": "pyspark_dstl.changelog.changelog_errors",
    "StoreIdError": "pyspark_dstl.backend.backend_errors",
    "StoreLockedError": "pyspark_dstl.backend.backend_errors",
    "StoreNotRegisteredError": "pyspark_dstl.materializer.materializer_errors",
    "TargetNotEmptyError": "pyspark_dstl.spark.moves.spark_checkpoint",
    "TimerError": "pyspark_dstl.spark",
    "TransientStorageError": "pyspark_dstl.changelog.changelog_errors",
    "TruncatedFileError": "pyspark_dstl.changelog.changelog_errors",
    "UncommittedAttemptError": "pyspark_dstl.backend.backend_errors",
    "uninstall": "pyspark_dstl.spark.switch.switch",
    "UnsupportedStorageError": "pyspark_dstl.changelog.changelog_errors",
    "UnsupportedVersionError": "pyspark_dstl.changelog.changelog_errors",
    "UploadFailedError": "pyspark_dstl.changelog.changelog_errors",
    "ValueState": "pyspark_dstl.spark",
    "VectorizedStatefulProcessor": "pyspark_dstl.spark",
    "WriterClosedError": "pyspark_dstl.changelog.changelog_errors",
}
_ALIASES = {"DefaultSource": "DstlStateDataSource"}


def __getattr__(name: str) -> Any:
    return load_lazy_name(__name__, _LAZY_NAMES, name, _ALIASES)


__all__ = ["ConfigError", "DstlError", "DstlWarning", *sorted(_LAZY_NAMES)]
