"""Processors written for PySpark's transformWithStateInPandas / transformWithState, unchanged.

    stateful(df).group_by("k").transformWithStateInPandas(
        statefulProcessor=MyProcessor(), outputStructType="k string, n long",
        outputMode="Update", timeMode="None", checkpoint_location=path)

`plan_transform` checks the arguments on the driver (also what PySpark checks only inside the
first batch: TTLs, state schemas, the time mode of TTL state) and wraps the processor in a
PySparkProcessorAdapter: a per-key processor of this backend that calls the PySpark methods
with PySpark's arguments (TimerValues, ExpiredTimerInfo, Rows or frames in PySpark's types).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark_dstl.backend.lineage.schema_records import (
    Declarations,
    SchemaHistory,
    StateDeclaration,
)
from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.core.units import parse_size
from pyspark_dstl.spark.codec.schema_history import canonical_schema
from pyspark_dstl.spark.keys.keyed_batch import KeyedBatch
from pyspark_dstl.spark.processors.declarations import declaring_handle
from pyspark_dstl.spark.processors.initial_state import InitialState
from pyspark_dstl.spark.processors.processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    VectorizedStatefulProcessor,
)
from pyspark_dstl.spark.pyspark_api.pyspark_rows import (
    PANDAS,
    ROWS,
    RowShape,
    key_type_names,
    output_timestamp_columns,
    tzinfo_of,
)
from pyspark_dstl.spark.pyspark_api.pyspark_state import CompatHandle, SchemaBook
from pyspark_dstl.spark.session import arrow_record_limit
from pyspark_dstl.spark.time.modes import time_mode_of
from pyspark_dstl.spark.time.query_time import (
    EVENT_TIME_TYPES,
    WATERMARK_METADATA,
    require_watermark_for_event_time,
)

ENTRIES = {PANDAS: "transformWithStateInPandas", ROWS: "transformWithState"}
OUTPUT_MODES = ("append", "update")


@dataclass(frozen=True)
class CompatPlan:
    """What `process(...)` needs to run a PySpark processor."""

    processor: PySparkProcessorAdapter
    output_schema: Any  # StructType
    time_mode: str
    initial_state: tuple[Any, tuple[str, ...]] | None


def plan_transform(df: Any, key_columns: Sequence[str], processor: Any, output_schema: Any,
                   output_mode: Any, time_mode: Any, initial_state: Any,
                   event_time_column: Any, rows_as: str) -> CompatPlan:
    """Check PySpark's arguments against the input and wrap the processor."""
    entry = ENTRIES[rows_as]
    _check_processor(processor)
    _check_output_mode(output_mode)
    mode = _time_mode(time_mode)
    struct = _output_struct(output_schema)
    _check_event_time_column(event_time_column, struct)
    _check_watermark(df, mode)
    if event_time_column:
        require_watermark_for_event_time(df, "eventTimeColumnName")
    zone = str(df.sparkSession.conf.get("spark.sql.session.timeZone"))
    tzinfo_of(zone)
    initial_names: tuple[str, ...] = ()
    initial_keys: tuple[str, ...] = ()
    initial = None
    if initial_state is not None:
        if not (hasattr(initial_state, "agg") and hasattr(initial_state, "_df")):
            raise ConfigError(f"initialState: expected a grouped DataFrame "
                              f"(other_df.groupBy(<key columns>)), got "
                              f"{type(initial_state).__name__}")
        grouped = InitialState.of(initial_state, tuple(key_columns), df.schema)
        initial_names, initial_keys = tuple(grouped.df.columns), grouped.key_columns
        initial = (grouped.df, grouped.key_columns)
    shape = RowShape(rows_as=rows_as, zone=zone,
                     key_types=key_type_names(df.schema, key_columns),
                     output_names=tuple(struct.names),
                     output_timestamps=output_timestamp_columns(struct),
                     initial_names=initial_names, initial_keys=initial_keys,
                     max_records=arrow_record_limit(df.sparkSession),
                     max_bytes=_arrow_byte_limit(df))
    schemas, variables = declared_schemas(processor, mode, entry)
    declarations = Declarations(_grouping_key_schema(df, key_columns), variables)
    adapter = PySparkProcessorAdapter(processor, shape, schemas, entry, declarations)
    adapter.output_mode = "Append" if output_mode.strip().lower() == "append" else "Update"
    return CompatPlan(adapter, struct, mode, initial)


def _arrow_byte_limit(df: Any) -> int:
    """Spark's limit of bytes per Arrow batch (spark.sql.execution.arrow.maxBytesPerBatch);
    0 for none."""
    key = "spark.sql.execution.arrow.maxBytesPerBatch"
    try:  # Spark knows the key and its default (it refuses a default given with get)
        raw = str(df.sparkSession.conf.get(key)).strip()
    except Exception:  # an older Spark without the key
        return 0
    return 0 if raw.startswith("-") else parse_size(raw, key)


def _check_processor(processor: Any) -> None:
    from pyspark.sql.streaming import StatefulProcessor as PySparkProcessor

    if isinstance(processor, PySparkProcessor):
        return
    if isinstance(processor, type):
        raise ConfigError(f"statefulProcessor: {processor.__name__} is a class; pass an "
                          f"instance, {processor.__name__}()")
    hint = ""
    if isinstance(processor, StatefulProcessor | VectorizedStatefulProcessor):
        hint = "; this backend's own processors run with .process(...)"
    raise ConfigError(f"statefulProcessor: {type(processor).__name__} is not a subclass of "
                      f"pyspark.sql.streaming.StatefulProcessor{hint}")


def _check_output_mode(value: Any) -> None:
    """Append and Update both emit what the processor yields: the sink decides the rest."""
    word = value.strip().lower() if isinstance(value, str) else None
    if word in OUTPUT_MODES:
        return
    why = (" (Complete is not supported by transformWithState: it emits what the processor "
           "yields)" if word == "complete" else "")
    raise ConfigError(f"outputMode: expected \"Append\" or \"Update\", got {value!r}{why}")


def _time_mode(value: Any) -> str:
    if isinstance(value, str):
        try:
            return time_mode_of(value)
        except ConfigError:
            pass
    raise ConfigError(f"timeMode: expected \"None\", \"ProcessingTime\" or \"EventTime\", got "
                      f"{value!r}")


def _output_struct(schema: Any) -> Any:
    from pyspark.sql.types import StructType, _parse_datatype_string

    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        try:
            parsed = _parse_datatype_string(schema)
        except Exception as exc:  # Spark's ParseException
            raise ConfigError(f"outputStructType: cannot parse {schema!r}: {exc}") from exc
        if isinstance(parsed, StructType):
            return parsed
    raise ConfigError(f"outputStructType: expected a StructType or a DDL string of fields "
                      f"such as 'key string, count long', got {schema!r:.120}")


def _check_event_time_column(name: Any, schema: Any) -> None:
    """The output column that carries event time (and the watermark) to the stateful steps
    after this one; every emitted row's time is checked against the late-events watermark."""
    if name is None or name == "":
        return
    if not isinstance(name, str) or name not in schema.names:
        raise ConfigError(f"eventTimeColumnName: no column {name!r} in outputStructType "
                          f"({', '.join(schema.names)})")
    type_name = schema[name].dataType.typeName()
    if type_name not in EVENT_TIME_TYPES:
        raise ConfigError(f"eventTimeColumnName: column {name!r} of outputStructType has type "
                          f"{type_name}; the event-time column must be a timestamp")


def _check_watermark(df: Any, mode: str) -> None:
    marked = [f.name for f in df.schema.fields if WATERMARK_METADATA in (f.metadata or {})]
    if len(marked) > 1:
        raise ConfigError(f"withWatermark: the input has watermarks on several columns "
                          f"{marked}; this backend follows one event-time column, keep "
                          f"withWatermark on one of them")
    if mode == "event_time" and not marked:
        raise ConfigError("timeMode: \"EventTime\" needs a watermark on the input: call "
                          "df.withWatermark(<timestamp column>, <delay>) before stateful(df)")


def declared_schemas(processor: Any, time_mode: str,
                     entry: str) -> tuple[dict[str, str], dict[str, StateDeclaration]]:
    """Run init() (then close()) on a copy of the processor with a declaring-only handle, as
    PySpark does on the driver; returns the DDL state schemas it declared, parsed, and every
    state variable it declared (what the checkpoint's schema record holds)."""
    from pyspark import cloudpickle
    from pyspark.sql.types import _parse_datatype_string

    copy = cloudpickle.loads(cloudpickle.dumps(processor))
    book = SchemaBook(parse=_parse_datatype_string)
    handle = CompatHandle(declaring_handle(time_mode), book, entry)
    copy.init(handle)
    copy.close()
    return book.parsed, dict(handle.declarations)


def _grouping_key_schema(df: Any, key_columns: Sequence[str]) -> str:
    from pyspark.sql.types import StructType

    return canonical_schema(StructType([df.schema[name] for name in key_columns]))


class PySparkProcessorAdapter(StatefulProcessor):
    """A pyspark StatefulProcessor as a per-key processor of this backend."""

    def __init__(self, processor: Any, shape: RowShape, schemas: dict[str, str],
                 entry: str, declarations: Declarations | None = None) -> None:
        self.processor = processor
        self.shape = shape
        self.schemas = schemas
        self.entry = entry
        self.output_mode = "Update"  # PySpark's outputMode argument (export-state repeats it)
        self.display_name = type(processor).__name__
        self.declarations = declarations
        # the checkpoint's state schemas, settled by the driver when the query starts
        # (driver/state_schemas.py); None: values are written without a schema id
        self.history: SchemaHistory | None = None

    def init(self, handle: StatefulProcessorHandle) -> None:
        from pyspark.sql.streaming.stateful_processor import TimerValues

        mode = handle.time_mode
        if mode == "none":
            self._timer_values = TimerValues(-1, -1)
        else:  # PySpark reports watermark 0 in processing time without a watermark
            watermark = handle.watermark_ms
            self._timer_values = TimerValues(handle.processing_time_ms,
                                             watermark if mode == "event_time"
                                             else max(watermark, 0))
        self._key = self.shape.key_shaper()
        self.processor.init(CompatHandle(handle, SchemaBook(self.schemas), self.entry,
                                         self.history))

    def rows_by_key(self, batch: KeyedBatch, initial: bool = False) -> Callable[[int], Any]:
        return self.shape.rows_by_key(batch.table, batch.offsets, initial)

    def handle_input_rows(self, key: tuple[Any, ...], rows: Iterator[Any]) -> Iterator[Any]:
        given = next(rows)  # the key's frames, or its Rows, as rows_by_key lists them
        return self._outputs(self.processor.handleInputRows(self._key(key), iter(given),
                                                            self._timer_values))

    def handle_expired_timer(self, key: tuple[Any, ...], expiry_ms: int) -> Iterator[Any]:
        from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo

        return self._outputs(self.processor.handleExpiredTimer(
            self._key(key), self._timer_values, ExpiredTimerInfo(expiry_ms)))

    def handle_initial_state(self, key: tuple[Any, ...], rows: Any) -> None:
        shaped = self._key(key)
        if self.shape.rows_as == PANDAS:
            self.processor.handleInitialState(shaped, rows, self._timer_values)
            return
        for row in rows:  # PySpark calls it once per initial state Row
            self.processor.handleInitialState(shaped, row, self._timer_values)

    def close(self) -> None:
        self.processor.close()

    def _outputs(self, items: Iterable[Any] | None) -> Iterator[Any]:
        if items is None:
            return
        name = self.display_name
        if self.shape.rows_as == PANDAS:
            shape_frame = self.shape.output_frame
            for frame in items:
                yield shape_frame(frame, name)
        else:
            shape_row = self.shape.output_row
            for row in items:
                yield shape_row(row, name)
