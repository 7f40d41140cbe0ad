"""Exceptions of the Structured Streaming integration; all derive from DstlSparkError.

Configuration problems raise changelog.errors.ConfigError (the project's one config error), so a
bad `spark.dstl.*` value fails the same way wherever it is parsed.
"""

from __future__ import annotations

from pyspark_dstl.backend.backend_errors import BackendError


class DstlSparkError(BackendError):
    """Root of every error raised by the Spark integration."""


class StateEncodingError(DstlSparkError, TypeError):
    """A state value or grouping key cannot be encoded with msgpack; names the state variable."""


class StateDecodingError(DstlSparkError):
    """Stored state bytes cannot be decoded; names the state variable."""


class StateVariableError(DstlSparkError, ValueError):
    """A state variable is declared twice with different kinds, or used outside its scope."""


class PartitionCountError(DstlSparkError):
    """The query asks for a number of state partitions other than the checkpoint's."""


class CommitValidationError(DstlSparkError):
    """A partition's new checkpoint is not built on the previously committed one."""


class PartitioningError(DstlSparkError):
    """A row reached a task whose partition does not own its key."""


class OutputSchemaError(DstlSparkError, ValueError):
    """Rows returned by a processor do not fit the declared output schema."""


class TimerError(DstlSparkError, ValueError):
    """A timer call is invalid: no time mode, no current key, or an expiry in the past."""


class OutputFileError(DstlSparkError):
    """A task's output file (outputMode "files") is missing, damaged or not what its task
    reported; names the file."""


class DropInUsageError(DstlSparkError, ValueError):
    """A call on the drop-in path that this backend cannot run as asked (a stateful step after
    transformWithState, an action on its streaming result, a sink or trigger it does not
    support); names the call and what to do instead."""


class StateSchemaError(DstlSparkError, ValueError):
    """A processor's state declarations cannot read the state its checkpoint holds (a
    narrowed or changed type, a changed key schema, state kind or TTL kind), or a schema
    record is missing or damaged; raised on the driver before any batch, naming the state
    variable, the field, the old and the new type, and what to do."""


class LateOutputRowError(DstlSparkError, ValueError):
    """A transformWithState step with an eventTimeColumnName emitted a row whose event time is
    at or before the watermark for late events (Spark's
    EMITTING_ROWS_OLDER_THAN_WATERMARK_NOT_ALLOWED); names the step, the column, the row's
    time and the watermark."""


class ChainedStepError(DstlSparkError, ValueError):
    """A stateful step after the first one cannot run as written (a step kind, aggregate
    function or output mode that Spark refuses or this backend does not support); raised
    where the step is written or where the query starts, naming the step and what to do."""


class AggregateOverflowError(DstlSparkError, ArithmeticError):
    """A chained aggregation's sum left the range of its type (Spark's default ANSI mode fails
    the same way); names the aggregate."""


class MoveError(DstlSparkError):
    """Root of the errors of moves between Spark's own operator and this backend (import-state,
    the in-place move, export-state, a location that another engine owns); line one names the
    checkpoint location or file and the command that fixes it."""


class SparkCheckpointHereError(MoveError):
    """A query of this backend starts on a location holding Spark's own streaming checkpoint
    and no state of this backend: it would start from empty state. The message gives the
    command that moves the state in place or into a new location."""


class LocationMovedError(MoveError):
    """The location's state moved to the other engine (export-state), or a move of it was
    interrupted: no engine may resume it until the move is finished; names the move and the
    command."""


class MoveRecordError(MoveError):
    """A move record under `<location>/moves/` or a move marker in Spark's offset log cannot
    be read; names the file."""


class PySparkVersionError(DstlSparkError):
    """A feature the installed PySpark (or the Spark behind a Connect session) does not have;
    names the feature, the version, the first version that has it and what to use instead."""


class PySparkVersionAttributeError(PySparkVersionError, AttributeError):
    """A PySpark method the installed version lacks, asked for with the switch installed (an
    AttributeError still, so `hasattr` answers as PySpark would)."""
