"""The "dstl-statestore" data source: Spark's `statestore` source on this backend's checkpoint
locations, with Spark's options, schemas, defaults and errors (Spark 4.x, transformWithState).

    spark.read.format("dstl-statestore").option("stateVarName", "count").load(location)

With the switch installed, `spark.read.format("statestore")` on such a location comes here
(switch/switch.py routes it; Spark's own checkpoints still go to Spark's source). A state read
restores each state partition's store at the batch into a private temporary directory (never
the running query's) and shows one variable, or the timers; `readChangeFeed` reads the
batches' changes from the changelog instead (change_feed.py). Options are checked as Spark
checks them, first problem first (statestore_options.py), and the checks that need the
operator (its state variables, time mode) follow Spark's order after them.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.lineage.naming import split_store_id
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.spark.codec.schema_history import SchemaHistory
from pyspark_dstl.spark.query_settings import QUERY_PREFIX, DstlSettings
from pyspark_dstl.spark.readers import state_data_errors as errors
from pyspark_dstl.spark.readers import statestore_options as names
from pyspark_dstl.spark.readers.change_feed import ChangePartition, ChangeRows, change_partitions
from pyspark_dstl.spark.readers.spark_rows import RowMaker
from pyspark_dstl.spark.readers.state_location import OperatorAtBatch, StateLocation
from pyspark_dstl.spark.readers.statestore_options import StateSourceOptions, parse_options
from pyspark_dstl.spark.readers.statestore_schema import TIMERS, ReadTarget, state_schema
from pyspark_dstl.spark.stage.worker_heap import freeze_imported_objects

SOURCE_NAME = "dstl-statestore"
SETTINGS_OPTION = "settings"
"""A JSON object of spark.dstl.* settings (the storage's, e.g. an S3 endpoint); the switch
fills it from the session."""


def settings_of(options: Mapping[str, Any]) -> dict[str, str]:
    """The spark.dstl.* settings a reader was given (its `settings` option), checked."""
    raw = {str(k).lower(): v for k, v in options.items()}.get(SETTINGS_OPTION) or "{}"
    try:
        given = json.loads(str(raw))
    except ValueError as exc:
        raise errors.invalid(SETTINGS_OPTION, f"not a JSON object of spark.dstl.* settings: "
                                              f"{exc}") from exc
    settings = {str(k): str(v) for k, v in dict(given).items()
                if not str(k).startswith(QUERY_PREFIX)}
    DstlSettings.from_settings(settings)  # a bad value fails here, naming the key
    return settings


def read_target(options: StateSourceOptions, operator: OperatorAtBatch,
                location: str) -> ReadTarget:
    """What the read shows, checked as Spark checks the options against the operator."""
    if options.join_side != "none":
        raise errors.invalid(names.JOIN_SIDE, "transformWithState state has no join side; "
                                              "read it without joinSide")
    if operator.history is None:
        raise errors.no_state_schema(
            options.describe(location),
            f"Operator {operator.operator_id} ({operator.name!r}) runs a processor of "
            f"pyspark-dstl's own API, whose state has no Spark schema: read it with "
            f"spark.read.format(\"dstl-state\")")
    if options.state_var_name is None and not options.read_registered_timers:
        raise errors.required(names.STATE_VAR_NAME)
    if options.store_name != names.DEFAULT_STORE_NAME:
        raise errors.invalid(names.STATE_VAR_NAME, f"State variable {options.store_name} is "
                                                   f"not defined for the transformWithState "
                                                   f"operator.")
    timers = operator.timer_variable
    if options.read_registered_timers and timers is None:
        raise errors.invalid(names.READ_REGISTERED_TIMERS,
                             "Registered timers are not available in TimeMode=None.")
    name = timers if options.read_registered_timers else options.state_var_name
    assert name is not None
    variables = operator.variables
    if name not in variables and name != timers:
        raise errors.invalid(names.STATE_VAR_NAME, f"State variable {name} is not defined for "
                                                   f"the transformWithState operator.")
    if name == timers:
        if not options.read_registered_timers:
            raise errors.reserved_name(name)
        return ReadTarget(name, TIMERS, None)
    declaration = variables[name]
    return ReadTarget(name, declaration.kind, declaration)


@dataclass
class StatePartition(InputPartition):
    """One state store of the operator at the batch read."""

    partition: int
    info: StoreCommit


class StateStoreRead:
    """One read of the source: the options checked against the location, the operator and
    what it shows, its schema and partitions. Built anew on the driver for the schema and for
    the reader (PySpark plans a Python source in two workers)."""

    def __init__(self, given: Mapping[str, Any], planned: bool = True) -> None:
        """`planned`: also find the partitions to read (the reader's; the schema needs
        only the checks)."""
        if names.PATH.lower() not in names.lowered(given):
            raise errors.required(names.PATH)
        self.settings = settings_of(given)
        with StateLocation(str(names.lowered(given)[names.PATH.lower()]),
                           self.settings) as location:
            self.url = location.url
            self.options = parse_options(given, location)
            operator = location.operator(self.options.batch_id, self.options.operator_id)
            if operator is None:
                count = len(location.entry(self.options.batch_id).operators)
                raise errors.invalid(names.OPERATOR_ID,
                                     f"batch {self.options.batch_id} has no stateful operator "
                                     f"{self.options.operator_id} (it has operator ids "
                                     f"0..{count - 1})")
            self.operator = operator
            self.target = read_target(self.options, operator, location.location)
            snapshot = self.options.snapshot
            if snapshot is not None and snapshot[1] >= operator.num_partitions:
                raise errors.no_partition(snapshot[1], self.options.operator_id, self.url)
            self.key = operator.grouping_key()
            self.key_types = operator.key_types()
            self.history: SchemaHistory | None = operator.history
            self.partitions = self._partitions(location) if planned else []

    @property
    def schema(self) -> Any:
        return state_schema(self.key, self.target, self.options.flatten_collection_types,
                            self.options.read_change_feed)

    def _partitions(self, location: StateLocation) -> list[InputPartition]:
        if self.options.change_range is None:
            return [StatePartition(p, info) for p, info in sorted(self.operator.stores.items())]
        start, end = self.options.change_range
        return list(change_partitions(location, self.options.operator_id, start, end))

    def row_maker(self, num_partitions: int, grouped: bool, now_ms: int | None) -> RowMaker:
        return RowMaker(self.target, self.history, self.key_types, num_partitions, grouped,
                        now_ms)


class StateStoreSource(DataSource):
    """Spark's `statestore` options (docs/state-data.md); plus `settings`, a JSON object of
    spark.dstl.* settings for the storage."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> Any:
        freeze_imported_objects()  # planned in a reused Python worker too
        return StateStoreRead(self.options, planned=False).schema

    def reader(self, schema: Any) -> DataSourceReader:
        freeze_imported_objects()  # planned in a reused Python worker too
        return StateStoreReader(StateStoreRead(self.options))


class StateStoreReader(DataSourceReader):
    def __init__(self, read: StateStoreRead) -> None:
        self.read_plan = read

    def partitions(self) -> list[InputPartition]:
        return list(self.read_plan.partitions)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        freeze_imported_objects()
        if isinstance(partition, ChangePartition):
            yield from self._changes(partition)
            return
        assert isinstance(partition, StatePartition)
        yield from self._state(partition)

    def _state(self, partition: StatePartition) -> Iterator[tuple[Any, ...]]:
        plan = self.read_plan
        operator = plan.operator
        maker = plan.row_maker(operator.num_partitions, operator.grouped, operator.now_ms)
        only = None if plan.options.snapshot is None else plan.options.snapshot[1]
        info = partition.info
        name, number = split_store_id(info.store_id)
        scratch = tempfile.mkdtemp(prefix="dstl-statestore-")
        settings = {**plan.settings, "spark.dstl.stateStore.localDir": scratch}
        try:
            with StateBackend(BackendSettings.from_mapping(settings)) as backend:
                store = backend.provider(plan.url, name, number).get_store(info.version, info)
                try:
                    rows = list(maker.state_rows(store.iterator(plan.target.column_family),
                                                 plan.options.flatten_collection_types))
                finally:
                    store.abort()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        yield from (row for row in rows if only is None or row[-1] == only)

    def _changes(self, partition: ChangePartition) -> Iterator[tuple[Any, ...]]:
        plan = self.read_plan
        yield from ChangeRows(plan.url, plan.settings, plan.target, plan.history,
                              tuple(plan.key_types)).rows(partition)
