"""The "dstl-state-metadata" data source: Spark's `state-metadata` source on this backend's
checkpoint locations (one row per stateful operator, Spark 4.x's columns and values).

    spark.read.format("dstl-state-metadata").load(location)

With the switch installed, `spark.read.format("state-metadata")` on such a location comes
here. `operatorName` is the operator PySpark plans for the call that started the query
(`transformWithStateInPandasExec`, or `transformWithStateInPySparkExec` for the Row API),
`operatorProperties` Spark's JSON: time mode, output mode and the state variables (the timers
listed as Spark lists them), in Spark's order; `minBatchId` / `maxBatchId` the committed
batches. Spark's hidden column `_numColsPrefixKey` has no counterpart: a Python data source
cannot hide a column.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from pyspark_dstl.spark.readers import state_data_errors as errors
from pyspark_dstl.spark.readers import statestore_options as names
from pyspark_dstl.spark.readers.state_location import (
    TIME_MODE_WORDS,
    OperatorAtBatch,
    StateLocation,
    operator_names,
)
from pyspark_dstl.spark.readers.statestore import settings_of
from pyspark_dstl.spark.stage.worker_heap import freeze_imported_objects

SOURCE_NAME = "dstl-state-metadata"
SCHEMA = ("operatorId BIGINT, operatorName STRING, stateStoreName STRING, numPartitions INT, "
          "minBatchId BIGINT, maxBatchId BIGINT, operatorProperties STRING")
OWN_API_OPERATOR = "dstlStatefulProcessorExec"
"""The operator name shown for a processor of this library's own API (Spark has none)."""
VARIABLE_TYPES = {"value": "ValueState", "list": "ListState", "map": "MapState"}
TIMER_TYPE = "TimerState"


# --- Spark's order of the state variables -----------------------------------------------------

def _string_hash(text: str) -> int:
    """Java's String.hashCode, as an unsigned 32-bit int (UTF-16 code units)."""
    value = 0
    data = text.encode("utf-16-be")
    for index in range(0, len(data), 2):
        value = (31 * value + int.from_bytes(data[index:index + 2], "big")) & 0xFFFFFFFF
    return value


def _mutable_map_order(names: Sequence[str]) -> list[str]:
    """Iteration order of Scala 2.13's mutable.HashMap (16 buckets; hash ^ (hash >>> 16),
    bucket = low bits, ascending signed hash within a bucket)."""
    def place(name: str) -> tuple[int, int]:
        spread = _string_hash(name) ^ (_string_hash(name) >> 16)
        return spread & 15, spread - (1 << 32) if spread & 0x80000000 else spread
    return sorted(names, key=place)


def _improved(name: str) -> int:
    """Scala 2.13's immutable.HashMap hash improvement of a key's hashCode."""
    h = _string_hash(name)
    h = (h + (~(h << 9) & 0xFFFFFFFF)) & 0xFFFFFFFF
    h ^= h >> 14
    h = (h + (h << 4)) & 0xFFFFFFFF
    return h ^ (h >> 10)


def _champ_order(names: Sequence[str], shift: int = 0) -> list[str]:
    """Iteration order of Scala 2.13's immutable.HashMap (a CHAMP trie): at each level the
    entries alone in their 5-bit slot first, by slot, then the slots holding several, each
    as a trie one level down."""
    slots: dict[int, list[str]] = {}
    for name in names:
        slots.setdefault((_improved(name) >> shift) & 31, []).append(name)
    alone = [found[0] for _, found in sorted(slots.items()) if len(found) == 1]
    shared = [found for _, found in sorted(slots.items()) if len(found) > 1]
    ordered = list(alone)
    for found in shared:
        ordered += found if shift >= 30 else _champ_order(found, shift + 5)
    return ordered


def spark_variable_order(names: Sequence[str]) -> list[str]:
    """The order Spark 4.x lists a transformWithState operator's state variables in: they are
    gathered in a mutable hash map and turned into an immutable map, which keeps the mutable
    map's order up to four entries and is a CHAMP trie beyond."""
    ordered = _mutable_map_order(names)
    return ordered if len(ordered) <= 4 else _champ_order(ordered)


# --- rows ---------------------------------------------------------------------------------------

def operator_properties(operator: OperatorAtBatch) -> str | None:
    """Spark's operatorProperties JSON of a transformWithState operator (None for a processor
    of this library's own API, as Spark shows null for operators other than
    transformWithState)."""
    if operator.history is None:
        return None
    entries: dict[str, dict[str, Any]] = {
        name: {"stateName": name, "stateVariableType": VARIABLE_TYPES[declaration.kind],
               "ttlEnabled": declaration.ttl}
        for name, declaration in operator.variables.items()}
    timers = operator.timer_variable
    if timers is not None:
        entries[timers] = {"stateName": timers, "stateVariableType": TIMER_TYPE,
                           "ttlEnabled": False}
    body = {"timeMode": TIME_MODE_WORDS.get(operator.time_mode, "NoTime"),
            "outputMode": operator.output_mode,
            "stateVariables": [entries[name] for name in spark_variable_order(list(entries))]}
    return json.dumps(body, separators=(",", ":"))


def metadata_rows(location: StateLocation, batch_id: int | None) -> list[tuple[Any, ...]]:
    """One row per stateful operator of the batch (default: the newest committed)."""
    batches = location.batch_ids()
    if not batches:
        return []
    chosen = batches[-1] if batch_id is None else batch_id
    if location.missing_batch(chosen) is not None:
        raise errors.no_operator_metadata(location.location, chosen)
    rows = []
    for operator_id in range(len(operator_names(location.entry(chosen)))):
        operator = location.operator(chosen, operator_id)
        assert operator is not None
        name = (operator.spark_operator_name if operator.history is not None
                else OWN_API_OPERATOR)
        rows.append((operator_id, name, names.DEFAULT_STORE_NAME, operator.num_partitions,
                     batches[0], batches[-1], operator_properties(operator)))
    return rows


class StateMetadataSource(DataSource):
    """Options: path (the checkpoint location), batchId (default: the newest committed), and
    `settings` (a JSON object of spark.dstl.* settings for the storage)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        freeze_imported_objects()  # planned in a reused Python worker too
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        freeze_imported_objects()  # planned in a reused Python worker too
        return StateMetadataReader(dict(self.options))


class StateMetadataReader(DataSourceReader):
    """As Spark's: a missing path or batch fails when the rows are read, not at load()."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        freeze_imported_objects()
        given = names.lowered(self.options)
        path = given.get(names.PATH.lower())
        if path is None:
            raise errors.required(names.PATH)
        raw = given.get(names.BATCH_ID.lower())
        batch_id = None
        if raw is not None:
            if not names.INTEGER.match(raw):
                raise errors.invalid(names.BATCH_ID, f"For input string: \"{raw}\" (a long "
                                                     f"integer is expected)")
            batch_id = int(raw)
        with StateLocation(path, settings_of(self.options)) as location:
            yield from metadata_rows(location, batch_id)
