"""Back to Spark: a location's state becomes a Spark checkpoint that PySpark's own
transformWithState operator (the switch uninstalled) resumes with the next batch.

    python -m pyspark_dstl export-state <location> <spark-checkpoint> --processor mod:Class
    pyspark_dstl.export_state(spark, location, spark_checkpoint, processor)

Spark writes its own state files: the export runs a short query of PySpark's own operator in a
staging checkpoint beside the target, whose processor (export_writer.py) lets the user's
processor declare its variables and writes this backend's state into them, read from the
location at its last committed batch M (export_records.py). Spark computes a TTL expiry from
the processing time of the batch that writes a value, so the staging query runs one batch
per distinct write time of TTL'd state, each replayed by Spark from an offset log entry written
here with that processing time (values without a TTL and event-time timers go in its first
batch; processing-time timers in a batch that runs before any of them is due). Every expiry
and timer is then Spark's exactly as it was here. The Spark checkpoint is then assembled
(spark_files.py): Spark's logs of the query here (engine checkpoint) as batch M, the staged
state as the state batch M leaves. The query on PySpark goes on with batch M+1 from the
sources' positions, and a file sink's log with that batch id.

A query that chains stateful steps after its transformWithState is exported with the chained
query (`query=`): the staging query is the whole chain, Spark's own operators in the same
number, order and kinds, and the first step's writer passes the chained steps' entries on to
them (chain_export.py); a chained transformWithState gets a StateWriter of its own processor,
its declarations checked as the first step's, and its TTL'd records staged by write time in
the same batches as the first step's; each operator's state and metadata are placed under its
Spark id.

In order, each step crash-safe and repeated by a new attempt if a kill interrupted it (kill
points `export_state_*`): the location is marked (a move marker in its Spark offset log, a
move record `moves/<n>` started), so neither engine resumes it from then on; the staging query
runs; the checkpoint is assembled beside the target and renamed into place; the move record
is done. The location is left behind: a query of this backend on it is refused, naming the
Spark checkpoint, and so is one of Spark's (the marker). Local paths only, for both.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark_dstl.backend.faults import kill_point
from pyspark_dstl.backend.fencing.lease import acquire
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.lineage.schema_records import history_at
from pyspark_dstl.backend.rescale.key_groups import key_groups_in
from pyspark_dstl.spark.chain.links import TRANSFORM
from pyspark_dstl.spark.codec.schema_history import canonical_schema
from pyspark_dstl.spark.driver.ownership import (
    DONE,
    STARTED,
    TO_SPARK,
    MoveRecord,
    display_location,
    location_status,
    marker_bytes,
    read_moves,
    spark_logs,
    write_marker,
    write_move,
    write_query_id,
)
from pyspark_dstl.spark.driver.rescale_query import KEY_TYPES
from pyspark_dstl.spark.locations import default_engine_checkpoint, to_url
from pyspark_dstl.spark.moves.chain_export import (
    EVENT_COLUMN,
    STEP,
    ChainedExport,
    ExportStateError,
    passed_columns,
    plan_chain_export,
    pyspark_method,
    refuse_unstaged,
    stage_step,
    staging_fields,
)
from pyspark_dstl.spark.moves.export_records import (
    CHAINED_RECORD,
    EXPIRY,
    RECORD_NAMES,
    SOURCE_NAME,
    TIMER,
    TIMER_RECORD,
    VARIABLE,
    WRITE_TIME,
    ExportRecordsSource,
)
from pyspark_dstl.spark.moves.export_writer import StateWriter
from pyspark_dstl.spark.moves.import_state import chain_of, resolve_processor
from pyspark_dstl.spark.moves.spark_checkpoint import local_path
from pyspark_dstl.spark.moves.spark_files import (
    pinned_conf,
    place_logs,
    place_operator_metadata,
    place_state,
)
from pyspark_dstl.spark.operator_list import QueryOperator, query_operators
from pyspark_dstl.spark.processors.declarations import declaring_handle
from pyspark_dstl.spark.pyspark_api.pyspark_state import CompatHandle, SchemaBook, ttl_ms_of
from pyspark_dstl.spark.query_settings import QUERY_PREFIX, DstlSettings
from pyspark_dstl.spark.session import session_settings
from pyspark_dstl.spark.stage.open_stores import executor_stores
from pyspark_dstl.spark.time.modes import PYSPARK_WORDS

__all__ = ["ExportReport", "ExportStateError", "export_state"]

log = logging.getLogger(__name__)
FIX = "export into a local directory (it can be copied elsewhere as a whole)"
PANDAS_ENTRY, ROWS_ENTRY = "transformWithStateInPandas", "transformWithState"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
OUTPUT = "exported long"
INTEGRAL = ("byte", "short", "integer", "long")


@dataclass(frozen=True)
class ExportReport:
    """What export_state did."""

    batch_id: int
    spark_checkpoint: str
    partitions: int
    key_columns: tuple[str, ...]
    time_mode: str
    variables: tuple[str, ...]
    records: int  # values, list elements, map entries and timers written
    spark_batches: int  # batches of Spark's operator that wrote them
    held_expiries: int  # TTL'd records whose expiry changes (see export_records.py)
    entry: str  # the PySpark call the query makes
    output_mode: str  # its outputMode argument
    chained: tuple[str, ...] = ()  # the chained steps exported, described

    def describe(self) -> str:
        held = (f"; {self.held_expiries} value(s) get another TTL expiry in Spark (their "
                f"variable's TTL changed since they were written)"
                if self.held_expiries else "")
        steps = (f", and the chained steps ({'; '.join(self.chained)})" if self.chained
                 else "")
        return (f"exported batch {self.batch_id}: {self.records} record(s) of "
                f"{len(self.variables)} state variable(s) ({', '.join(self.variables) or '-'}) "
                f"and timers{steps}, {self.partitions} state partitions, key "
                f"({', '.join(self.key_columns)}), time mode {self.time_mode}, written by "
                f"{self.spark_batches} batch(es) of Spark's operator into "
                f"{self.spark_checkpoint}; start the query with {self.entry}(..., "
                f"outputMode={self.output_mode!r}, ...) (switch uninstalled) on that "
                f"checkpointLocation: its next batch is "
                f"{self.batch_id + 1}{held}")


@dataclass(frozen=True)
class Declared:
    kind: str
    schema: Any  # as init() gave it (DDL or StructType)
    key_schema: Any
    ttl_ms: int | None


class DeclarationRecorder(CompatHandle):
    """The compat path's declaring handle, noting what init() declares and how."""

    def __init__(self, time_mode: str, book: SchemaBook) -> None:
        super().__init__(declaring_handle(time_mode), book, "export-state")
        self.noted: dict[str, Declared] = {}
        self._mode = time_mode

    def _note(self, name: str, kind: str, schema: Any, key: Any, ttl: Any) -> None:
        self.noted[name] = Declared(kind, schema, key, ttl_ms_of(name, ttl, self._mode))

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: Any = None) -> Any:
        self._note(stateName, "value", schema, None, ttlDurationMs)
        return super().getValueState(stateName, schema, ttlDurationMs)

    def getListState(self, stateName: str, schema: Any, ttlDurationMs: Any = None) -> Any:
        self._note(stateName, "list", schema, None, ttlDurationMs)
        return super().getListState(stateName, schema, ttlDurationMs)

    def getMapState(self, stateName: str, userKeySchema: Any, valueSchema: Any,
                    ttlDurationMs: Any = None) -> Any:
        self._note(stateName, "map", valueSchema, userKeySchema, ttlDurationMs)
        return super().getMapState(stateName, userKeySchema, valueSchema, ttlDurationMs)


@dataclass(frozen=True)
class Source:
    """The location at its last committed batch, read before anything is written."""

    url: str
    storage: Any
    settings: DstlSettings
    operator: str
    batch_id: int
    entry: Any  # CommitEntry
    engine: Path
    operators: tuple[QueryOperator, ...]  # the first step, then the chained steps

    @property
    def chained(self) -> tuple[QueryOperator, ...]:
        return tuple(op for op in self.operators if op.position > 0)

    @property
    def time(self) -> Mapping[str, Any]:
        return dict(self.entry.extra.get("time") or {})

    @property
    def time_mode(self) -> str:
        return str(self.time.get("mode", "none"))


def export_state(spark: Any, checkpoint_location: str, spark_checkpoint: str, processor: Any,
                 *, name: str | None = None, settings: Mapping[str, Any] | None = None,
                 engine_checkpoint: str | None = None, rows: bool | None = None,
                 output_mode: str | None = None, query: Any = None,
                 query_output_mode: str = "append") -> ExportReport:
    """Write a Spark checkpoint at `spark_checkpoint` (a new directory) from which PySpark's
    own operator goes on with the location's next batch (module docstring). `processor`: the
    query's PySpark StatefulProcessor, an instance or "module:Class"; `rows`: the query calls
    transformWithState (Rows) rather than transformWithStateInPandas, `output_mode`: the
    call's outputMode, "Append" or "Update" (both by default as the location's commit entries
    record them: Spark refuses a checkpoint whose operator was called otherwise). A query
    that chains stateful steps after its transformWithState exports their state too, given
    as `query`: the chained DataFrame as written with the switch on (or the builder's
    stream), and `query_output_mode`, its writeStream outputMode (chain_export.py)."""
    processor = resolve_processor(processor)
    links = chain_of(query, query_output_mode)
    url = to_url(checkpoint_location)
    local_path(url, "checkpoint location", FIX)
    target = local_path(spark_checkpoint, "Spark checkpoint", FIX)
    overrides = dict(settings or {})
    overrides[QUERY_PREFIX + "checkpointLocation"] = url
    if name is not None:
        overrides[QUERY_PREFIX + "operatorName"] = name
    resolved = DstlSettings.from_session(spark, overrides)
    storage = executor_stores().backend(resolved.backend_settings).context(url).storage
    resumed = _check_moves(storage, url, target)
    lease = acquire(storage, resolved.backend.fencing, purpose="export-state")
    try:
        source = _read_location(url, storage, resolved, engine_checkpoint)
        report = _export(spark, source, processor, target, rows, output_mode, resumed,
                         _chain_exports(source, links, query is not None))
    finally:
        lease.release("export-state finished")
    return report


def _check_moves(storage: Any, url: str, target: Path) -> MoveRecord | None:
    """The interrupted export to `target` to finish, if any; refuses every other case where
    the location is not this backend's to export."""
    status = location_status(storage)
    last = status.last_move
    shown = display_location(url)
    if status.moved_to_spark and last is not None:
        if Path(display_location(last.spark_checkpoint)) != target:
            raise ExportStateError(
                f"checkpoint location {shown!r}: its state was exported to "
                f"{last.spark_checkpoint!r} ({last.phase}); a location is exported once: "
                f"{'finish that export' if last.phase == STARTED else 'use that checkpoint'}")
        if last.phase == DONE:
            raise ExportStateError(f"checkpoint location {shown!r} was exported to "
                                   f"{str(target)!r} already (after batch {last.batch_id})")
        return last
    if status.moving_in:
        raise ExportStateError(f"checkpoint location {shown!r}: an in-place move from Spark "
                               f"is not finished; finish it first (python -m pyspark_dstl "
                               f"import-state {shown} {shown} --processor ...)")
    if not status.has_state:
        raise ExportStateError(f"checkpoint location {shown!r} holds no committed batch of "
                               f"this backend: there is no state to export")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ExportStateError(f"Spark checkpoint {str(target)!r} already exists: export into "
                               f"a new directory")
    return None


def _read_location(url: str, storage: Any, settings: DstlSettings,
                   engine_checkpoint: str | None) -> Source:
    latest = CommitLog(storage).latest()
    if latest is None:
        raise ExportStateError(f"checkpoint location {display_location(url)!r} holds no "
                               f"committed batch")
    batch_id, entry = latest
    operator = settings.query.operator_name
    if operator not in entry.operators:
        raise ExportStateError(f"checkpoint location {display_location(url)!r}: batch "
                               f"{batch_id} has no operator {operator!r} (it has "
                               f"{sorted(entry.operators)}); give --name")
    operators = tuple(query_operators(entry))
    first = next(op for op in operators if op.position == 0)
    if operator != first.name:
        raise ExportStateError(
            f"checkpoint location {display_location(url)!r}: operator {operator!r} is step "
            f"{next(op.position for op in operators if op.name == operator)} of batch "
            f"{batch_id}'s chain, not its first stateful step: give the first step's name "
            f"({first.name!r}); its export brings the chained steps along")
    refuse_unstaged(f"checkpoint location {display_location(url)!r}", operators)
    engine_url = (engine_checkpoint or settings.query.engine_checkpoint_location
                  or default_engine_checkpoint(url))
    engine = local_path(engine_url, "engine checkpoint", FIX)
    if not (engine / "offsets" / str(batch_id)).is_file():
        raise ExportStateError(
            f"engine checkpoint {str(engine)!r} has no offset log entry of batch {batch_id}, "
            f"the location's last committed batch: give the query's engine checkpoint "
            f"(--engine-checkpoint)")
    return Source(url, storage, settings, operator, batch_id, entry, engine, operators)


def _chain_exports(source: Source, links: tuple[Any, ...], given: bool
                   ) -> tuple[ChainedExport, ...]:
    """The chained steps' exports, paired with the query's steps; a chained location without
    the query is refused (the command line cannot build one)."""
    where = f"checkpoint location {display_location(source.url)!r}"
    if source.chained and not given:
        raise ExportStateError(
            f"{where}: batch {source.batch_id}'s query chains stateful steps after its "
            f"transformWithState ("
            + "; ".join(f"{op.label or op.kind} as Spark's operator {op.spark_operator_id}"
                        for op in source.chained)
            + "): export it from Python with the chained query, export_state(..., "
            "query=<the chained DataFrame as written with pyspark_dstl.install() on>, "
            "query_output_mode=...)")
    if not source.chained:
        if links:
            raise ExportStateError(
                f"{where}: batch {source.batch_id}'s query chains no stateful step after its "
                f"transformWithState, but the query given chains {len(links)}: give the query "
                f"the location ran")
        return ()
    grouped = key_groups_in(source.entry.extra) is not None
    return plan_chain_export(where, source.operators, links, grouped)


def _declarations(processor: Any, source: Source, operator: str | None = None,
                  time_mode: str | None = None, step: str = ""
                  ) -> tuple[dict[str, Declared], SchemaBook]:
    """What the processor's init() declares (run on a copy on the driver), checked against
    the state the location holds for `operator` (the first step by default; `step` names a
    chained one in messages)."""
    from pyspark import cloudpickle
    from pyspark.sql.types import _parse_datatype_string

    book = SchemaBook(parse=_parse_datatype_string)
    recorder = DeclarationRecorder(time_mode or source.time_mode, book)
    copy = cloudpickle.loads(cloudpickle.dumps(processor))
    copy.init(recorder)
    copy.close()
    history = history_at(source.storage, operator or source.operator, source.entry)
    if history is not None:
        stored = history.records[history.current].declarations.variables
        for variable, declared in stored.items():
            mine = recorder.noted.get(variable)
            what = f"{step}state variable {variable!r} ({declared.kind} state)"
            if mine is None:
                raise ExportStateError(f"{what} of the location is not declared by "
                                       f"{type(processor).__name__}.init(): give the "
                                       f"processor class the query runs with")
            struct = book.struct(mine.schema, variable)
            if mine.kind != declared.kind or canonical_schema(struct) != declared.value_schema:
                raise ExportStateError(
                    f"{what}: {type(processor).__name__}.init() declares it as {mine.kind} "
                    f"state with schema {struct.simpleString()}, not as the location's last "
                    f"batch wrote it; export with the processor the query ran with (or run "
                    f"one batch here with the new one first)")
    return recorder.noted, book


def _variables_plan(declared: Mapping[str, Declared]) -> list[dict[str, Any]]:
    """The declared variables as the records source reads them, in name order (the order
    of the writer's variable indexes)."""
    return [{"name": n, "kind": declared[n].kind, "ttl_ms": declared[n].ttl_ms}
            for n in sorted(declared)]


def _writer(processor: Any, declared: Mapping[str, Declared], book: SchemaBook, rows: bool,
            columns: list[str], *args: Any, **kwargs: Any) -> StateWriter:
    """A StateWriter of `processor` for the variables its init() declared (name order)."""
    names = sorted(declared)
    return StateWriter(processor, [(n, declared[n].kind) for n in names], book.parsed,
                       {n: declared[n].schema for n in names},
                       {n: declared[n].key_schema for n in names
                        if declared[n].kind == "map"}, rows, columns, *args, **kwargs)


def _chained_writers(source: Source, exports: tuple[ChainedExport, ...]
                     ) -> tuple[tuple[ChainedExport, ...], dict[int, dict[str, Any]]]:
    """Each chained transformWithState's StateWriter (its processor's declarations checked
    against the step's state, as the first step's) and what the records source reads of it
    (by step position); the other exports as they are."""
    import dataclasses

    done, transforms = [], {}
    for index, export in enumerate(exports):
        if export.link.kind != TRANSFORM:
            done.append(export)
            continue
        op, adapter = export.operator, export.link.processor
        time_mode = str(dict(op.record.get("state") or {}).get("time_mode", "none"))
        step = f"step {op.position} {op.label} (Spark's operator {op.spark_operator_id}): "
        declared, book = _declarations(adapter.processor, source, op.name, time_mode, step)
        history = history_at(source.storage, op.name, source.entry)
        transforms[export.position] = {
            "variables": _variables_plan(declared),
            "history": None if history is None else history.to_dict(),
            "time_mode": time_mode, "key_columns": list(export.link.key_columns)}
        later = exports[index + 1:]
        passed = passed_columns(later)
        writer = _writer(adapter.processor, declared, book, adapter.entry == ROWS_ENTRY,
                         [*export.link.key_columns, *RECORD_NAMES, *passed,
                          *([EVENT_COLUMN] if time_mode == "event_time" else [])],
                         output_names=passed, step=export.position,
                         integral=[STEP, *(f.name for f in staging_fields(later)
                                           if f.dataType.typeName() in INTEGRAL)])
        done.append(dataclasses.replace(export, writer=writer))
    return tuple(done), transforms


def _export(spark: Any, source: Source, processor: Any, target: Path, rows: bool | None,
            output_mode: str | None, resumed: MoveRecord | None,
            exports: tuple[ChainedExport, ...]) -> ExportReport:
    from pyspark.sql import functions as F

    declared, book = _declarations(processor, source)
    exports, transforms = _chained_writers(source, exports)
    entry_name = _entry(source, rows)
    mode = _output_mode(source, output_mode)
    commit = source.entry.operators[source.operator]
    partitions = commit.num_partitions
    key_columns = tuple(str(c) for c in source.entry.extra.get("key_columns") or ())
    key_types = list(source.entry.extra.get(KEY_TYPES) or ())
    if len(key_types) != len(key_columns):
        raise ExportStateError(f"checkpoint location {display_location(source.url)!r}: its "
                               f"commit entry does not record the key columns' types (written "
                               f"by an older release): run one batch here, then export")
    names = sorted(declared)
    history = history_at(source.storage, source.operator, source.entry)
    now_ms = int(source.time.get("now_ms", source.entry.created_ms))
    plan = {"now_ms": now_ms, "key_columns": [list(k) for k in zip(key_columns, key_types,
                                                                    strict=True)],
            "variables": _variables_plan(declared),
            "history": None if history is None else history.to_dict(),
            "stores": {str(p): info.to_dict() for p, info in commit.stores.items()},
            "settings": source.settings.backend_settings,
            "grouped": key_groups_in(source.entry.extra) is not None,
            "chained": [{"position": export.position,
                         "stores": {str(p): info.to_dict() for p, info in
                                    source.entry.operators[export.operator.name]
                                    .stores.items()},
                         "transform": transforms.get(export.position)}
                        for export in exports]}
    spark.dataSource.register(ExportRecordsSource)

    def reader(**options: str) -> Any:
        read = spark.read.format(SOURCE_NAME).option("path", source.url).option(
            "plan", json.dumps(plan))
        return read.options(**options).load()

    ttl_case = F.when(F.col(VARIABLE) == CHAINED_RECORD, F.lit(0)).otherwise(
        F.lit(None).cast("long"))  # a chained step's EXPIRY is its expiry less its TTL
    for index, name in enumerate(names):
        if declared[name].ttl_ms is not None:
            ttl_case = F.when(F.col(VARIABLE) == index, F.lit(declared[name].ttl_ms)
                              ).otherwise(ttl_case)
    # processing-time timers: the first step's in that mode, a chained step's (its records
    # carry TIMER only then)
    processing_timer = F.when((F.col(VARIABLE) == CHAINED_RECORD) | F.lit(
        source.time_mode == "processing_time"), F.col(TIMER))
    summary = reader().groupBy(WRITE_TIME).agg(
        F.count(F.lit(1)).alias("records"), F.min(processing_timer).alias("first_timer"),
        F.sum(F.when(F.col(EXPIRY) - ttl_case != F.col(WRITE_TIME), 1).otherwise(0)
              ).alias("held")
    ).collect()
    records = sum(int(row["records"]) for row in summary)
    held = sum(int(row["held"] or 0) for row in summary)
    times = sorted(int(row[WRITE_TIME]) for row in summary if row[WRITE_TIME] is not None)
    timers = [int(row["first_timer"]) for row in summary if row["first_timer"] is not None]
    stages, stage_times = _stages(source, times, min(timers) if timers else None, now_ms)

    if resumed is None:
        _mark(source, target)
    kill_point("export_state_marked")
    if not target.exists() or not any(target.iterdir()):
        scratch = target.with_name(f".{target.name}.exporting")
        if scratch.exists():
            shutil.rmtree(scratch)
        staging, assembled = scratch / "staging", scratch / "checkpoint"
        writer = _writer(processor, declared, book, entry_name == ROWS_ENTRY,
                         [*key_columns, *RECORD_NAMES,
                          *([EVENT_COLUMN] if source.time_mode == "event_time" else [])],
                         {export.position: export.stager for export in exports},
                         [STEP, *(field.name for field in staging_fields(exports))])
        _run_staging(spark, source, writer, (entry_name, mode), key_columns, partitions,
                     staging, json.dumps(plan), stages, stage_times, exports)
        kill_point("export_state_staged")
        assembled.mkdir(parents=True)
        time_extra = source.time
        place_logs(source.engine, assembled, source.batch_id, pinned_conf(staging),
                   int(time_extra.get("watermark_ms", 0) or 0), now_ms,
                   int(time_extra.get("next_watermark_ms", 0) or 0))
        last_stage = len(stage_times)
        for operator in source.operators:  # Spark's ids: the same in both queries
            number = str(operator.spark_operator_id)
            place_state(staging, assembled, range(operator.num_partitions), last_stage + 1,
                        source.batch_id + 1, number)
            place_operator_metadata(staging, assembled, target, last_stage, source.batch_id,
                                    number)
        if target.exists():
            target.rmdir()  # an empty directory the user made
        assembled.rename(target)
        shutil.rmtree(scratch)
    kill_point("export_state_placed")
    write_move(source.storage, MoveRecord(TO_SPARK, DONE, source.batch_id, target.as_uri(),
                                          {"entry": entry_name}))
    report = ExportReport(batch_id=source.batch_id, spark_checkpoint=str(target),
                          partitions=partitions, key_columns=key_columns,
                          time_mode=source.time_mode, variables=tuple(names), records=records,
                          spark_batches=1 + len(stage_times), held_expiries=held,
                          entry=entry_name, output_mode=mode,
                          chained=tuple(export.describe() for export in exports))
    log.warning("checkpoint %s: state of batch %d exported to the Spark checkpoint %s; this "
                "location is left behind (both engines refuse it): %s",
                source.url, source.batch_id, target, report.describe())
    return report


def _entry(source: Source, rows: bool | None) -> str:
    if rows is not None:
        return ROWS_ENTRY if rows else PANDAS_ENTRY
    recorded = source.entry.extra.get("pyspark_entry")
    if recorded in (PANDAS_ENTRY, ROWS_ENTRY):
        return str(recorded)
    imported = str((source.entry.extra.get("imported") or {}).get("spark_operator", ""))
    if imported and "pandas" not in imported.lower():
        return ROWS_ENTRY
    return PANDAS_ENTRY


def _output_mode(source: Source, given: str | None) -> str:
    extra = source.entry.extra
    word = (given or extra.get("pyspark_output_mode")
            or (extra.get("imported") or {}).get("spark_output_mode") or "Update")
    if str(word).strip().lower() not in ("append", "update"):
        raise ExportStateError(f"outputMode {word!r}: give Append or Update, as the query's "
                               f"transformWithState call does")
    return "Append" if str(word).strip().lower() == "append" else "Update"


def _stages(source: Source, times: list[int], first_timer: int | None, now_ms: int
            ) -> tuple[dict[str, int], dict[int, int]]:
    """(write time -> stage, as the records source takes it; stage -> the processing time of
    its batch). Stage 0 is the staging query's first batch (any processing time): records
    without a TTL, and timers unless some step holds processing-time timers (`first_timer`,
    the earliest of them): then every timer goes in stage 1, before it is due."""
    stages = {str(t): i + 1 for i, t in enumerate(times)}
    stage_times = {i + 1: t for i, t in enumerate(times)}
    if first_timer is not None:
        if not stage_times:
            stage_times[1] = min(now_ms, first_timer - 1)
        stages[str(TIMER_RECORD)] = 1
        if max(stage_times.values()) >= first_timer:
            raise ExportStateError(
                f"checkpoint location {display_location(source.url)!r}: a processing-time "
                f"timer is due at {first_timer}, before state written at "
                f"{max(stage_times.values())} could be written by Spark without firing it; "
                f"run one more batch here (it fires the timer), then export")
    return stages, stage_times


def _mark(source: Source, target: Path) -> None:
    """Neither engine resumes the location from here on (driver/ownership.py). A location
    that never held Spark's own checkpoint also gets Spark's `metadata` file (a query id):
    Spark then reads the marker and quotes it, where it would otherwise only say that the
    file is missing."""
    if not spark_logs(source.storage).present:
        write_query_id(source.storage)
    logs = spark_logs(source.storage)
    numbered = (*logs.offsets, *logs.markers)
    at = max(numbered) + 1 if numbered else 0
    write_marker(source.storage, at, marker_bytes(
        f"the state of this location moved back to Spark's operator by export-state after "
        f"batch {source.batch_id}: start the query (without pyspark_dstl.install()) with "
        f"checkpointLocation {target}", {"move": TO_SPARK, "batch_id": source.batch_id,
                                         "spark_checkpoint": str(target)}))
    if not read_moves(source.storage) or read_moves(source.storage)[-1].kind != TO_SPARK:
        write_move(source.storage, MoveRecord(TO_SPARK, STARTED, source.batch_id,
                                              target.as_uri(), {}))


def _run_staging(spark: Any, source: Source, writer: StateWriter, call: tuple[str, str],
                 key_columns: tuple[str, ...], partitions: int, staging: Path, plan: str,
                 stages: Mapping[str, int], stage_times: Mapping[int, int],
                 exports: tuple[ChainedExport, ...] = ()) -> None:
    """Spark's operator writes the state: stage 0 as a new query, each later stage replayed
    from an offset log entry with its processing time (module docstring); the chained steps
    run after it as Spark's own operators (chain_export.py)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, StructField, StructType

    output: Any = (StructType([StructField(STEP, IntegerType()), *staging_fields(exports)])
                   if exports else OUTPUT)

    settings = {"spark.sql.shuffle.partitions": str(partitions),
                "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
                "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled":
                    "false",
                "spark.sql.streaming.stateStore.checkpointFormatVersion": "1"}
    options = {"stages": json.dumps(stages)}
    entry_name, output_mode = call

    def run_once() -> None:
        df = (spark.readStream.format(SOURCE_NAME).option("path", source.url)
              .option("plan", plan).options(**options).load())
        if source.time_mode == "event_time":
            # one second after the epoch: Spark drops rows at or below the watermark (0 in
            # the first batch); no timer is due that early
            df = df.withColumn(EVENT_COLUMN, F.lit(1).cast("timestamp")).withWatermark(
                EVENT_COLUMN, "0 seconds")
        method = pyspark_method(df.groupBy(*key_columns), entry_name)
        out = method(statefulProcessor=writer, outputStructType=output, outputMode=output_mode,
                     timeMode=PYSPARK_WORDS.get(source.time_mode, "None"))
        for index, export in enumerate(exports):
            out = stage_step(out, export, exports[index + 1:])
        query = (out.writeStream.format("noop").outputMode("update")  # runs every task
                 .option("checkpointLocation", str(staging)).trigger(once=True).start())
        query.awaitTermination()
        if query.exception() is not None:
            raise ExportStateError(f"Spark's operator failed to write the exported state in "
                                   f"{str(staging)!r}: {query.exception()}")

    with session_settings(spark, settings):
        run_once()
        first = (staging / "offsets" / "0").read_text(encoding="utf-8").splitlines()
        metadata = json.loads(first[1])
        for stage, at in sorted(stage_times.items()):
            entry = {**metadata, "batchWatermarkMs": 0, "batchTimestampMs": at}
            (staging / "offsets" / str(stage)).write_text(
                "\n".join([first[0], json.dumps(entry), json.dumps({"stage": stage})]),
                encoding="utf-8")
            run_once()
            if not (staging / "commits" / str(stage)).is_file():
                raise ExportStateError(f"Spark's operator did not commit stage {stage} of the "
                                       f"export in {str(staging)!r}")
