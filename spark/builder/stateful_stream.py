"""The short entry point: stateful(df).group_by(...).process(...).foreach_batch(...).start().

Everything is checked when the query starts (settings, key columns, schema, checkpoint), so a
mistake fails before the first batch, with the key or column named.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.spark.builder.started_query import StatefulQuery
from pyspark_dstl.spark.chain.grouping import GroupedSteps
from pyspark_dstl.spark.chain.planning import for_output_mode
from pyspark_dstl.spark.chain.steps import ChainedSteps
from pyspark_dstl.spark.driver import query_lease as fencing
from pyspark_dstl.spark.driver.operator import BatchProgress, OperatorSpec, StatefulOperator
from pyspark_dstl.spark.driver.ownership import check_location, processor_name
from pyspark_dstl.spark.driver.progress import log_batch, with_state_progress
from pyspark_dstl.spark.driver.state_schemas import settle_operator
from pyspark_dstl.spark.locations import default_engine_checkpoint, to_url
from pyspark_dstl.spark.processors.declarations import check_declarations
from pyspark_dstl.spark.processors.initial_state import InitialState
from pyspark_dstl.spark.processors.processor import StatefulProcessor, VectorizedStatefulProcessor
from pyspark_dstl.spark.pyspark_versions import refuse_available_now_with_timers
from pyspark_dstl.spark.query_settings import QUERY_PREFIX, DstlSettings
from pyspark_dstl.spark.readers.discovery import warn_if_undiscoverable
from pyspark_dstl.spark.session import (
    ARROW_RECORDS,
    is_connect,
    no_data_batches,
    python_sources_allowed,
)
from pyspark_dstl.spark.spark_errors import StateVariableError
from pyspark_dstl.spark.time.clock import TimeSpec
from pyspark_dstl.spark.time.query_time import check_output_event_time, time_spec
from pyspark_dstl.spark.time.ticks import default_demand_file, tick_stream

Sink = Callable[[Any, int], None]
PYSPARK_PROCESSOR_MODULE = "pyspark.sql.streaming.stateful_processor"
KEY_TYPES = ("string", "byte", "short", "integer", "long", "boolean", "binary", "float",
             "double", "timestamp", "timestamp_ntz", "date")


def stateful(df: Any) -> StatefulBuilder:
    """Start describing a stateful step on a streaming (or batch) DataFrame."""
    return StatefulBuilder(df)


class StatefulBuilder:
    def __init__(self, df: Any) -> None:
        self._df = df

    def group_by(self, *columns: str) -> GroupedStateful:
        if not columns:
            raise ConfigError("group_by(): give at least one grouping column")
        names = set(self._df.columns)
        for column in columns:
            if column not in names:
                raise ConfigError(f"group_by: no column {column!r} in the input; its columns are "
                                  f"{sorted(names)}")
            type_name = self._df.schema[column].dataType.typeName()
            if type_name not in KEY_TYPES:
                raise ConfigError(f"group_by: column {column!r} has type {type_name}; grouping "
                                 f"keys must be one of {', '.join(KEY_TYPES)}")
        return GroupedStateful(self._df, tuple(columns))


class GroupedStateful:
    def __init__(self, df: Any, key_columns: tuple[str, ...]) -> None:
        self._df = df
        self._keys = key_columns

    def process(self, processor: StatefulProcessor | VectorizedStatefulProcessor,
                output_schema: Any, *, checkpoint_location: str | None = None,
                partitions: int | None = None, name: str | None = None,
                settings: Mapping[str, Any] | None = None, time_mode: str = "none",
                event_time: str | None = None, watermark_delay: str | float | None = None,
                initial_state: Any = None,
                output_event_time: str | None = None) -> StatefulStream:
        """`checkpoint_location`: where the query keeps its state (a path or URL; else the
        setting spark.dstl.query.checkpointLocation). `settings`: per-query spark.dstl.*
        settings (full or short keys) over the session's.

        `time_mode`: "none", "processing_time" or "event_time" (PySpark's spellings work too).
        `event_time` and `watermark_delay` (e.g. "10 minutes") name the event-time column and
        how late rows may be; without them, a watermark set with df.withWatermark is used.
        `initial_state`: `other_df.groupBy(<key columns>)`, applied once before the first batch.
        `output_event_time`: the output column that carries event time to the stateful steps
        chained after this one (PySpark's eventTimeColumnName): it inherits the watermark, and
        an emitted row at or before the watermark for late events fails the batch.
        """
        if isinstance(processor, type):
            raise StateVariableError(f"processor: {processor.__name__} is a class; pass an "
                                     f"instance, {processor.__name__}()")
        if not isinstance(processor, StatefulProcessor | VectorizedStatefulProcessor):
            hint = ""
            if any(c.__module__ == PYSPARK_PROCESSOR_MODULE for c in type(processor).__mro__):
                hint = ("; a pyspark StatefulProcessor runs with .transformWithStateInPandas(...)"
                        " or .transformWithState(...)")
            raise StateVariableError(f"{type(processor).__name__} is neither a "
                                     f"StatefulProcessor nor a VectorizedStatefulProcessor"
                                     f"{hint}")
        spark = self._df.sparkSession
        time = time_spec(self._df, time_mode, event_time, watermark_delay)
        check_declarations(processor, time.mode)
        initial = (None if initial_state is None
                   else InitialState.of(initial_state, self._keys, self._df.schema))
        overrides = dict(settings or {})
        if checkpoint_location is not None:
            overrides[QUERY_PREFIX + "checkpointLocation"] = checkpoint_location
        if partitions is not None:
            overrides[QUERY_PREFIX + "partitions"] = partitions
        if name is not None:
            overrides[QUERY_PREFIX + "operatorName"] = name
        resolved = DstlSettings.from_session(spark, overrides)
        given = resolved.query.checkpoint_location
        if given is None:
            raise ConfigError(f"{QUERY_PREFIX}checkpointLocation: no checkpoint location; pass "
                              f"checkpoint_location=... or set "
                              f"{QUERY_PREFIX}checkpointLocation")
        location = to_url(given)
        if time.needs_ticks:
            time = TimeSpec(time.mode, time.event_time_column, time.watermark_delay_ms,
                            default_demand_file(location, resolved.query.operator_name))
        struct = _struct(spark, output_schema)
        if output_event_time is not None:
            check_output_event_time(self._df, struct, output_event_time, "output_event_time")
        spec = OperatorSpec(processor=processor, key_columns=self._keys,
                            output_schema=struct,
                            location=location, partitions=resolved.query.partitions,
                            name=resolved.query.operator_name, time=time,
                            initial_state=initial, output_event_time=output_event_time)
        return StatefulStream(self._df, StatefulOperator(spec, resolved))

    def transformWithStateInPandas(
            self, statefulProcessor: Any, outputStructType: Any,
            outputMode: str, timeMode: str, initialState: Any = None,
            eventTimeColumnName: str = "", *, checkpoint_location: str | None = None,
            partitions: int | None = None, name: str | None = None,
            settings: Mapping[str, Any] | None = None) -> StatefulStream:
        """PySpark's `df.groupBy(...).transformWithStateInPandas(...)` on this backend: a
        subclass of pyspark.sql.streaming.StatefulProcessor runs unchanged, with pandas
        DataFrames in and out. The keywords after PySpark's arguments are process(...)'s."""
        return self._transform("pandas", statefulProcessor, outputStructType, outputMode,
                               timeMode, initialState, eventTimeColumnName,
                               checkpoint_location, partitions, name, settings)

    def transformWithState(
            self, statefulProcessor: Any, outputStructType: Any,
            outputMode: str, timeMode: str, initialState: Any = None,
            eventTimeColumnName: str = "", *, checkpoint_location: str | None = None,
            partitions: int | None = None, name: str | None = None,
            settings: Mapping[str, Any] | None = None) -> StatefulStream:
        """PySpark's `df.groupBy(...).transformWithState(...)` on this backend: the Row-based
        variant, with pyspark.sql.Row in and out."""
        return self._transform("rows", statefulProcessor, outputStructType, outputMode,
                               timeMode, initialState, eventTimeColumnName,
                               checkpoint_location, partitions, name, settings)

    def _transform(self, rows_as: str, processor: Any, output_schema: Any, output_mode: str,
                   time_mode: str, initial_state: Any, event_time_column: str,
                   checkpoint_location: str | None, partitions: int | None, name: str | None,
                   settings: Mapping[str, Any] | None) -> StatefulStream:
        from pyspark_dstl.spark.pyspark_api.transform import plan_transform

        plan = plan_transform(self._df, self._keys, processor, output_schema, output_mode,
                              time_mode, initial_state, event_time_column, rows_as)
        return self.process(plan.processor, plan.output_schema,
                            checkpoint_location=checkpoint_location, partitions=partitions,
                            name=name, settings=settings,
                            time_mode=plan.time_mode, initial_state=plan.initial_state,
                            output_event_time=event_time_column or None)


class StatefulStream:
    """A configured stateful step, and the stateful steps chained after it (`group_by`,
    `drop_duplicates`, ...); `start` runs them as one streaming query via foreachBatch."""

    def __init__(self, df: Any, operator: StatefulOperator, *,
                 chain: ChainedSteps | None = None, output_mode: str = "append") -> None:
        self._df = df
        self._first = operator  # the first stateful step alone
        self._chain = chain
        self._mode = output_mode
        self._operator: StatefulOperator | None = None
        self.progress: list[BatchProgress] = []
        self._sink: Sink | None = None
        self._on_progress: Callable[[BatchProgress], None] | None = None

    @property
    def operator(self) -> StatefulOperator:
        """The query's operator: the first step's with the chained steps, planned for the
        output mode (Spark's refusals for the mode come from here, as from Spark's start)."""
        if self._operator is None:
            self._operator = self._build()
        return self._operator

    def _build(self) -> StatefulOperator:
        first = self._first
        links = self._chain.links if self._chain is not None else ()
        if not links and self._mode == "append":
            return first
        configured = for_output_mode(links, self._mode, self._entry())
        time = first.spec.time
        if configured and time.tick_file is None and time.event_time_column is not None:
            # chained steps evict with the watermark: batches without data once it moves
            time = dataclasses.replace(time, tick_file=default_demand_file(
                first.location, first.spec.name))
        spec = dataclasses.replace(first.spec, chain=configured, time=time,
                                   query_output_mode=self._mode)
        return StatefulOperator(spec, first.settings)

    def _entry(self) -> str:
        return self._chain.entry if self._chain is not None else "process"

    def _steps(self) -> ChainedSteps:
        if self._chain is not None:
            return self._chain
        spec = self._first.spec
        return ChainedSteps.after(self._df, spec.output_schema, spec.output_event_time,
                                  spec.time.mode, type(spec.processor).__name__)

    def _chained(self, chain: ChainedSteps, call: str = "") -> StatefulStream:
        return StatefulStream(self._df, self._first, chain=chain, output_mode=self._mode)

    # --- stateful steps after this one (spark/chain) ---------------------------------------

    def group_by(self, *columns: Any) -> GroupedSteps[StatefulStream]:
        """An aggregation or a transformWithState after this step, as PySpark's GroupedData:
        `.group_by(F.window("ts", "10 seconds")).count()`, `.agg(...)`,
        `.transformWithStateInPandas(...)`."""
        return GroupedSteps(self._steps(), columns, self._chained)

    def drop_duplicates(self, subset: Sequence[str] | None = None) -> StatefulStream:
        """Rows whose `subset` columns (all columns without it) were not seen before."""
        label = f"dropDuplicates({list(subset)!r})" if subset else "dropDuplicates()"
        return self._chained(self._steps().deduplicate(subset, False, label))

    def drop_duplicates_within_watermark(self, subset: Sequence[str] | None = None
                                         ) -> StatefulStream:
        """Rows whose `subset` columns were not seen within the watermark delay."""
        label = (f"dropDuplicatesWithinWatermark({list(subset)!r})" if subset
                 else "dropDuplicatesWithinWatermark()")
        return self._chained(self._steps().deduplicate(subset, True, label))

    def transform(self, func: Callable[[Any], Any]) -> StatefulStream:
        """A stateless step on each batch's output of the last stateful step (a function of
        a DataFrame, e.g. lambda df: df.withColumn(...)); tried now on an empty batch."""
        return self._chained(self._steps().then(func))

    def with_chain(self, chain: ChainedSteps, output_mode: str) -> StatefulStream:
        """This step with the steps `chain` planned after it (the switch's stand-in builds
        them), in a query of `output_mode`; the stateless steps after the last stateful step
        are the caller's to apply."""
        return StatefulStream(self._df, self._first, chain=dataclasses.replace(chain, steps=()),
                              output_mode=output_mode)

    def output_mode(self, mode: str) -> StatefulStream:
        """The query's output mode: "append" (default), "update" or "complete"; it decides
        what a chained aggregation emits, with Spark's rules."""
        return StatefulStream(self._df, self._first, chain=self._chain,
                              output_mode=str(mode).lower())

    def foreach_batch(self, sink: Sink) -> StatefulStream:
        """`sink(output_df, batch_id)` runs once per batch before the commit; make it
        idempotent per batch id (a batch can be replayed after a failure)."""
        self._sink = sink
        return self

    def on_progress(self, callback: Callable[[BatchProgress], None]) -> StatefulStream:
        self._on_progress = callback
        return self

    def pyspark_processor(self) -> Any:
        """The PySpark StatefulProcessor the step runs (transformWithState...), else None."""
        return getattr(self.operator.spec.processor, "processor", None) if hasattr(
            self.operator.spec.processor, "entry") else None

    def uses_ticks(self) -> bool:
        """Whether the query reads the tick source beside its input (one source more in its
        engine checkpoint's offset log)."""
        return (self.operator.spec.time.tick_file is not None
                and no_data_batches(self._df.sparkSession))

    def check_location(self, engine: str | None = None) -> None:
        """Refuse a location another engine owns, or one holding Spark's own checkpoint and no
        state of this backend (driver/ownership.py), before anything is written."""
        pyspark = self.pyspark_processor()
        check_location(self.operator._storage(), self.operator.location,
                       processor_name(pyspark) if pyspark is not None else None,
                       None if engine is None else to_url(engine))

    def run_batch(self, df: Any, batch_id: int) -> None:
        """The foreachBatch function; also usable directly on a batch DataFrame."""
        progress = self.operator.process_batch(df, batch_id, self._batch_sink())
        self.progress.append(progress)
        log_batch(progress, self.operator.spec.name, self.operator.location,
                  show=self.operator.settings.query.log_progress)
        if self._on_progress is not None:
            self._on_progress(progress)

    def _batch_sink(self) -> Sink | None:
        """The sink, after the stateless steps written since the last stateful step."""
        sink, chain = self._sink, self._chain
        if sink is None or chain is None or not chain.steps:
            return sink

        def shaped(output: Any, batch_id: int) -> None:
            sink(chain.finish(output), batch_id)

        return shaped

    def check_trigger(self, trigger: Mapping[str, Any] | None) -> None:
        """Refuse, before anything is written, a trigger this PySpark cannot run with the
        query's time mode (availableNow with timers before Spark 4.2: pyspark_versions.py)."""
        if self.operator.spec.time.tick_file is not None and no_data_batches(
                self._df.sparkSession):
            refuse_available_now_with_timers(self._df.sparkSession, trigger,
                                             self.operator.spec.time.mode)

    def start(self, *, trigger: Mapping[str, Any] | None = None,
              engine_checkpoint: str | None = None, query_name: str | None = None) -> Any:
        """Start the streaming query. `trigger` as DataStreamWriter.trigger's keywords, e.g.
        {"availableNow": True} or {"processingTime": "5 seconds"}. The engine's own checkpoint
        (offsets, commits) goes to `engine_checkpoint`, by default <checkpoint location>/engine
        (the setting spark.dstl.query.engineCheckpointLocation gives another)."""
        from pyspark_dstl.spark.readers.state_reader import register_state_reader

        warn_if_undiscoverable()
        if trigger is not None and not isinstance(trigger, Mapping):
            raise ConfigError(f"trigger={trigger!r}: give DataStreamWriter.trigger's keywords as "
                              f"a dict, e.g. trigger={{'processingTime': {str(trigger)!r}}} or "
                              f"trigger={{'availableNow': True}}")
        self.check_trigger(trigger)
        if not self._df.isStreaming:
            raise ConfigError("start(): the input is a batch DataFrame, not a stream; read it "
                              "with spark.readStream, or run it as one batch with "
                              ".run_batch(df, batch_id)")
        engine = engine_checkpoint or self.operator.settings.query.engine_checkpoint_location
        if engine is None:
            engine = default_engine_checkpoint(self.operator.location,
                                               also=" or start(engine_checkpoint=...)")
        self.check_location(engine)
        register_state_reader(self._df.sparkSession)
        source = self._df
        tick_file = self.operator.spec.time.tick_file
        if tick_file is not None and self.uses_ticks():
            if not python_sources_allowed(source.sparkSession, "timers"):
                raise ConfigError(
                    f"{ARROW_RECORDS}: timers reach this backend through a Python data "
                    f"source, which needs a positive value; set it to a number of rows (Spark's "
                    f"default is 10000)")
            self.operator.publish_latest_demand()
            source = source.unionByName(tick_stream(source.sparkSession, source.schema,
                                                    tick_file))
        if self.operator.settings.query.observed_metrics and python_sources_allowed(
                source.sparkSession, "the state metrics in Spark's progress"):
            source = with_state_progress(source, self.operator.location,
                                         self.operator.spec.name,
                                         self.operator.settings.backend_settings)
        writer = source.writeStream.foreachBatch(self.run_batch)
        writer = writer.option("checkpointLocation", engine)
        if trigger:
            writer = writer.trigger(**dict(trigger))
        if query_name:
            writer = writer.queryName(query_name)
        if is_connect(source.sparkSession):
            # Spark Connect runs foreachBatch in a Python process of the server: that process
            # takes the location at its first batch (a lease is a process's own), not this client
            return StatefulQuery(writer.start())
        lease = fencing.start_query(self.operator)  # refused while another run holds the location
        try:
            with lease.use():
                settle_operator(self.operator)  # state schemas: refused or recorded here
                query = writer.start()
                fencing.attach_query(self.operator, query)
        except BaseException:
            fencing.abandon_query(self.operator)
            raise
        operator = self.operator
        return StatefulQuery(query, on_end=lambda: fencing.end_query(operator, query))


def _struct(spark: Any, schema: Any) -> Any:
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        try:  # the session parses it: works on Spark Connect too (no local JVM there)
            parsed = spark.createDataFrame([], schema).schema
        except Exception as exc:  # Spark's parse error, whatever its class
            raise ConfigError(f"output schema {schema!r} is not a valid DDL string: "
                             f"{exc}") from exc
        if isinstance(parsed, StructType):
            return parsed
    raise ConfigError(f"output schema must be a StructType or a DDL string such as "
                     f"'user string, count long', got {schema!r}")
