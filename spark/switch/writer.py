"""`StatefulStreamWriter`: PySpark's DataStreamWriter surface for a StatefulDataFrame.

`checkpointLocation` is the checkpoint location: this backend's state lives at it and Spark's own
engine checkpoint (offsets, commits) under `<checkpointLocation>/engine`, or where
spark.dstl.query.engineCheckpointLocation says (which a location on S3 needs). Without a
checkpoint location the writer does what Spark does for the sink: a temporary checkpoint
(console, memory, foreach, foreachBatch, noop) or Spark's error (every other sink). `start()`
returns the StreamingQuery.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from pyspark_dstl.spark.locations import default_engine_checkpoint, to_url
from pyspark_dstl.spark.query_settings import DstlSettings
from pyspark_dstl.spark.session import is_connect
from pyspark_dstl.spark.spark_errors import DropInUsageError

if TYPE_CHECKING:
    from pyspark_dstl.spark.builder.stateful_stream import StatefulStream
from pyspark_dstl.spark.switch.sinks import (
    CONSOLE,
    FILE_FORMATS,
    FOREACH,
    FOREACH_BATCH,
    MEMORY,
    FileSink,
    MemorySink,
    Sink,
    batch_writer_sink,
    console_sink,
    foreach_sink,
    table_sink,
)

TEMPORARY_CHECKPOINT_SINKS = frozenset({CONSOLE, MEMORY, FOREACH, FOREACH_BATCH, "noop"})
OUTPUT_MODES = ("append", "update", "complete")
SESSION_CHECKPOINT = "spark.sql.streaming.checkpointLocation"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
QUERY_PARTITIONS = "spark.dstl.query.partitions"
HADOOP_S3_SCHEMES = ("s3a://", "s3n://")


class StreamingResult(Protocol):
    """What the writer needs of the stateful step's result (`frame.StatefulDataFrame`)."""

    @property
    def columns(self) -> list[str]: ...

    @property
    def schema(self) -> Any: ...

    @property
    def sparkSession(self) -> Any: ...

    @property
    def stateful_call(self) -> Any: ...

    @property
    def compat_plan(self) -> Any: ...

    @property
    def chained_steps(self) -> Any: ...

    def apply_steps(self, output: Any) -> Any: ...


class StatefulStreamWriter:
    """Records the writer's settings as PySpark's DataStreamWriter does; `start` or `toTable`
    builds the stateful query with the sink."""

    def __init__(self, frame: StreamingResult) -> None:
        self._frame = frame
        self._name: str | None = None
        self._mode = "append"
        self._trigger: dict[str, Any] = {}
        self._options: dict[str, str] = {}
        self._partition_by: tuple[str, ...] = ()
        self._format: str | None = None
        self._function: Callable[[Any, int], None] | None = None
        self._foreach: Any = None

    def queryName(self, queryName: str) -> StatefulStreamWriter:
        if not isinstance(queryName, str) or not queryName.strip():
            raise DropInUsageError(f"queryName({queryName!r}): give a non-empty string")
        self._name = queryName.strip()
        return self

    def outputMode(self, outputMode: str) -> StatefulStreamWriter:
        mode = str(outputMode).lower()
        if mode == "complete" and not self._frame.chained_steps.has_aggregation:
            raise DropInUsageError(
                f"outputMode({outputMode!r}): transformWithState runs in Append or Update mode, "
                f"not Complete (Complete output mode needs a streaming aggregation, in Spark "
                f"too); use outputMode('append') or outputMode('update')")
        if mode not in OUTPUT_MODES:
            raise DropInUsageError(f"outputMode({outputMode!r}): unknown output mode; use "
                                   f"'append', 'update' or 'complete'")
        self._mode = mode
        return self

    def trigger(self, *, processingTime: str | None = None, once: bool | None = None,
                continuous: str | None = None, availableNow: bool | None = None,
                realTime: str | None = None) -> StatefulStreamWriter:
        if continuous is not None:
            raise DropInUsageError(
                f"trigger(continuous={continuous!r}): continuous processing runs no stateful "
                f"operator, in Spark either; use trigger(processingTime=...) or "
                f"trigger(availableNow=True)")
        if realTime is not None:
            raise DropInUsageError(
                f"trigger(realTime={realTime!r}): Real-Time Mode does not run foreachBatch, "
                f"where this backend's stateful stage runs; use trigger(processingTime=...)")
        given = {key: value for key, value in (("processingTime", processingTime),
                                               ("once", once), ("availableNow", availableNow))
                 if value is not None}
        if len(given) != 1:
            raise DropInUsageError(f"trigger({', '.join(f'{k}={v!r}' for k, v in given.items())}"
                                   f"): give exactly one of processingTime, once, availableNow")
        key, value = next(iter(given.items()))
        if key == "processingTime" and (not isinstance(value, str) or not value.strip()):
            raise DropInUsageError(f"trigger(processingTime={value!r}): give an interval such "
                                   f"as '10 seconds'")
        if key != "processingTime" and value is not True:
            raise DropInUsageError(f"trigger({key}={value!r}): the value must be True")
        self._trigger = given
        return self

    def option(self, key: str, value: Any) -> StatefulStreamWriter:
        self._options[str(key)] = _option_text(value)
        return self

    def options(self, **options: Any) -> StatefulStreamWriter:
        for key, value in options.items():
            self.option(key, value)
        return self

    def partitionBy(self, *cols: str | list[str]) -> StatefulStreamWriter:
        if len(cols) == 1 and isinstance(cols[0], list | tuple):
            cols = tuple(cols[0])
        missing = [c for c in cols if c not in self._frame.columns]
        if missing:
            raise DropInUsageError(f"partitionBy({', '.join(map(repr, cols))}): no column "
                                   f"{missing[0]!r} in the output "
                                   f"({', '.join(self._frame.columns)})")
        self._partition_by = tuple(str(c) for c in cols)
        return self

    def format(self, source: str) -> StatefulStreamWriter:
        self._format = str(source)
        return self

    def foreachBatch(self, func: Callable[[Any, int], None]) -> StatefulStreamWriter:
        if not callable(func):
            raise DropInUsageError(f"foreachBatch({type(func).__name__}): give a function of "
                                   f"(batch DataFrame, batch id)")
        self._format, self._function = FOREACH_BATCH, func
        return self

    def foreach(self, f: Any) -> StatefulStreamWriter:
        foreach_sink(f)  # checks the writer now, as PySpark does
        self._format, self._foreach = FOREACH, f
        return self

    def clusterBy(self, *cols: str) -> StatefulStreamWriter:
        raise DropInUsageError("clusterBy(...): not supported on this backend's sinks; use "
                               "partitionBy(...) or cluster the table outside the query")

    def start(self, path: str | None = None, format: str | None = None,
              outputMode: str | None = None, partitionBy: Any = None,
              queryName: str | None = None, **options: Any) -> Any:
        """Start the query: the stateful stage in foreachBatch, then the sink."""
        self._apply_start_arguments(format, outputMode, partitionBy, queryName, options)
        if path is not None:
            self._options["path"] = str(path)
        kind = self._format or str(self._frame.sparkSession.conf.get("spark.sql.sources.default"))
        checkpoints = self._checkpoints(kind)  # refused before a sink makes anything
        return self._start(checkpoints, self._sink(kind))

    def toTable(self, tableName: str, format: str | None = None,
                outputMode: str | None = None, partitionBy: Any = None,
                queryName: str | None = None, **options: Any) -> Any:
        """Start the query writing into a catalog table (created if it does not exist)."""
        self._apply_start_arguments(format, outputMode, partitionBy, queryName, options)
        kind = f"table {tableName}"
        checkpoints = self._checkpoints(kind)  # refused before the table is created
        spark = self._frame.sparkSession
        sink = table_sink(spark, tableName, self._format, self._frame.schema,
                          self._partition_by, self._sink_options())
        return self._start(checkpoints, sink)

    # --- building the query ----------------------------------------------------------------

    def _apply_start_arguments(self, file_format: str | None, mode: str | None,
                               partition_by: Any, name: str | None,
                               options: dict[str, Any]) -> None:
        if file_format is not None:
            self.format(file_format)
        if mode is not None:
            self.outputMode(mode)
        if partition_by is not None:
            self.partitionBy(*([partition_by] if isinstance(partition_by, str)
                               else partition_by))
        if name is not None:
            self.queryName(name)
        self.options(**options)

    def _sink_options(self) -> dict[str, str]:
        return {k: v for k, v in self._options.items() if k not in ("checkpointLocation", "path")}

    def _sink(self, kind: str) -> Sink:
        spark = self._frame.sparkSession
        if kind == FOREACH_BATCH:
            assert self._function is not None
            return self._function
        if kind == FOREACH:
            return foreach_sink(self._foreach)
        if kind == CONSOLE:
            return console_sink(self._options)
        if kind == MEMORY:
            if self._name is None:
                raise DropInUsageError("format('memory'): the memory sink needs "
                                       "queryName(...), the name of the view it fills")
            return MemorySink(self._name, self._frame.schema, spark)
        path = self._options.get("path")
        if kind.lower() in FILE_FORMATS:
            if path is None:
                raise DropInUsageError(f"format({kind!r}).start(): the file sink needs a path; "
                                       f"pass start(path) or option('path', ...)")
            if self._mode != "append":
                raise DropInUsageError(
                    f"format({kind!r}) with outputMode({self._mode!r}): a file sink only "
                    f"appends, in Spark too (files once written are never changed); use "
                    f"outputMode('append'), or write updates with foreachBatch or a table "
                    f"format that merges")
            if is_connect(spark):
                raise DropInUsageError(
                    f"format({kind!r}) on Spark Connect: the exactly-once file sink needs the "
                    f"driver's JVM, which a Connect client does not reach; write the files in "
                    f"foreachBatch (at least once) or run the query in a classic session")
            return FileSink(path, kind.lower(), self._partition_by, self._sink_options())
        return batch_writer_sink(kind, path, self._partition_by, self._sink_options())

    def _start(self, checkpoints: tuple[str, str], sink: Sink) -> Any:
        from pyspark_dstl.spark.builder.stateful_stream import GroupedStateful

        checkpoint, engine = checkpoints
        call, plan, frame = self._frame.stateful_call, self._frame.compat_plan, self._frame
        # the session's shuffle partitions at start: another count than the checkpoint's
        # rescales its state (inside foreachBatch Spark shows the engine checkpoint's count)
        # (spark.dstl.query.partitions, when the session sets it, is the count asked for)
        session = self._frame.sparkSession
        shuffle = (None if _session_conf(session, QUERY_PARTITIONS)
                   else _session_conf(session, SHUFFLE_PARTITIONS))
        stream = GroupedStateful(call.source, call.key_columns).process(
            plan.processor, plan.output_schema, checkpoint_location=checkpoint,
            time_mode=plan.time_mode,
            initial_state=plan.initial_state, partitions=int(shuffle) if shuffle else None,
            output_event_time=call.arguments.get("eventTimeColumnName") or None)
        stream = stream.with_chain(frame.chained_steps, self._mode)
        stream.check_trigger(self._trigger or None)  # before the location is touched

        def write(output: Any, batch_id: int) -> None:
            sink(frame.apply_steps(output), batch_id)

        _settle_location(stream, engine)

        return stream.foreach_batch(write).start(
            trigger=self._trigger or None, engine_checkpoint=engine, query_name=self._name)

    def _checkpoints(self, kind: str) -> tuple[str, str]:
        """(this backend's checkpoint, Spark's engine checkpoint) for the query: the engine
        checkpoint is spark.dstl.query.engineCheckpointLocation when the session sets it, else
        `<location>/engine` for a local location; any other location without the setting is
        refused, naming it (Spark writes through Hadoop, which has no s3:// file system)."""
        spark = self._frame.sparkSession
        location = self._options.get("checkpointLocation")
        if location is None:
            base = _session_conf(spark, SESSION_CHECKPOINT)
            if base:
                location = base.rstrip("/") + "/" + (self._name or str(uuid.uuid4()))
            elif kind in TEMPORARY_CHECKPOINT_SINKS:
                location = tempfile.mkdtemp(prefix="dstl-temporary-")
            else:
                raise DropInUsageError(
                    f"checkpointLocation: the {kind} sink needs a checkpoint location; set "
                    f"option('checkpointLocation', ...) or the session's {SESSION_CHECKPOINT}")
        state = location
        for scheme in HADOOP_S3_SCHEMES:
            if location.startswith(scheme):
                state = "s3://" + location[len(scheme):]
        engine = DstlSettings.from_session(spark).query.engine_checkpoint_location
        if engine is None and "://" not in location:
            engine = os.path.join(os.path.abspath(os.path.expanduser(location)), "engine")
        elif engine is None:
            engine = default_engine_checkpoint(to_url(location))
        return state, engine


def _settle_location(stream: StatefulStream, engine: str) -> None:
    """spark.dstl.query.sparkCheckpoint=migrate: Spark's own checkpoint at the location (or an
    interrupted move of it) is moved in place before the query starts (moves/in_place.py);
    any other location the query does not own is refused by the start's own check."""
    from pyspark_dstl.spark.moves.importer import TICK_OFFSET
    from pyspark_dstl.spark.moves.in_place import MoveSetup, settle_at_start

    setup = MoveSetup(stream.operator.location, engine, stream.operator.settings,
                      (TICK_OFFSET,) if stream.uses_ticks() else ())
    settle_at_start(stream._df.sparkSession, stream.pyspark_processor(), setup,
                    stream.operator.spec.chain)


def _session_conf(spark: Any, key: str) -> str | None:
    try:
        value = spark.conf.get(key, None)
    except Exception:  # Spark Connect raises for keys it does not know
        return None
    return str(value) if value else None


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
