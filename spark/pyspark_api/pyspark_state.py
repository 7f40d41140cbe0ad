"""PySpark's state API over this backend's state variables: camelCase methods, values as the
tuples their schema describes, TTL in milliseconds, timers of the current key.

Schemas given as DDL strings need Spark's parser, which lives in the JVM: the driver parses
them when it checks the processor's init() and ships the parsed schemas with the processor, so
executors never need a JVM round trip (PySpark asks its JVM over a socket instead).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from pyspark.errors import PySparkRuntimeError
from pyspark.sql.streaming.stateful_processor import (
    ListState as PySparkListState,
)
from pyspark.sql.streaming.stateful_processor import (
    MapState as PySparkMapState,
)
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessorHandle as PySparkHandle,
)
from pyspark.sql.streaming.stateful_processor import (
    ValueState as PySparkValueState,
)

from pyspark_dstl.backend.lineage.schema_records import SchemaHistory, StateDeclaration
from pyspark_dstl.spark.codec.evolution import VersionedRowCodec
from pyspark_dstl.spark.codec.schema_history import canonical_schema, value_schemas
from pyspark_dstl.spark.codec.typed_values import RowCodec
from pyspark_dstl.spark.processors.processor import StatefulProcessorHandle
from pyspark_dstl.spark.processors.state_variables import ListState, MapState, ValueState
from pyspark_dstl.spark.spark_errors import StateVariableError, TimerError
from pyspark_dstl.spark.time.modes import PYSPARK_WORDS


class DeletedStateError(StateVariableError, PySparkRuntimeError):
    """A state variable was used after `handle.deleteIfExists` removed it; PySpark raises its
    PySparkRuntimeError there, so this is one too."""

    def __init__(self, message: str) -> None:
        PySparkRuntimeError.__init__(self, message=message)
        self._text = message

    def __str__(self) -> str:
        return self._text


class _Deletable:
    """What every PySpark-shaped state variable shares: it refuses use once deleted, with
    PySpark's wording of the failed operation first."""

    _name = ""
    _deleted = False

    def _check(self, operation: str) -> None:
        if self._deleted:
            raise DeletedStateError(
                f"Error {operation}: state variable {self._name!r} was deleted with "
                f"handle.deleteIfExists; declare it again (handle.get...State) to use it")


class SchemaBook:
    """State schemas by DDL string. On the driver `parse` fills it; on executors it only
    answers from what the driver parsed (`parsed`: DDL -> StructType JSON)."""

    def __init__(self, parsed: Mapping[str, str] | None = None,
                 parse: Callable[[str], Any] | None = None) -> None:
        self.parsed: dict[str, str] = dict(parsed or {})
        self._parse = parse
        self._structs: dict[str, Any] = {}

    def struct(self, schema: Any, what: str) -> Any:
        from pyspark.sql.types import DataType, StructType

        if isinstance(schema, StructType):
            return schema
        if isinstance(schema, DataType):
            raise StateVariableError(f"state {what}: the schema must be a StructType (fields), "
                                     f"got {schema.simpleString()}")
        if not isinstance(schema, str):
            raise StateVariableError(f"state {what}: the schema must be a StructType or a DDL "
                                     f"string such as 'count long', got {schema!r:.80}")
        found = self._structs.get(schema)
        if found is not None:
            return found
        if schema in self.parsed:
            found = StructType.fromJson(json.loads(self.parsed[schema]))
        elif self._parse is None:
            raise StateVariableError(f"state {what}: schema {schema!r} was not declared when "
                                     f"init() ran on the driver; init() must declare the same "
                                     f"state schemas every time it runs")
        else:
            try:
                found = self._parse(schema)
            except Exception as exc:  # Spark's ParseException and friends
                raise StateVariableError(f"state {what}: cannot parse the schema {schema!r}: "
                                         f"{exc}") from exc
            if not isinstance(found, StructType):
                raise StateVariableError(f"state {what}: the schema must be fields such as "
                                         f"'count long', got the type {schema!r}")
            self.parsed[schema] = found.json()
        self._structs[schema] = found
        return found


def ttl_ms_of(name: str, ttl: Any, time_mode: str) -> int | None:
    """ttlDurationMs checked as PySpark's JVM checks it, but here, on the driver."""
    import numpy as np

    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | np.integer):
        raise StateVariableError(f"state {name}: ttlDurationMs must be a whole number of "
                                 f"milliseconds, got {ttl!r} ({type(ttl).__name__})")
    if ttl <= 0:
        raise StateVariableError(f"state {name}: ttlDurationMs must be positive, got {ttl}")
    if time_mode != "processing_time":
        raise StateVariableError(f"state {name}: ttlDurationMs needs timeMode="
                                 f"\"ProcessingTime\" (as in PySpark); this query has timeMode="
                                 f"\"{PYSPARK_WORDS.get(time_mode, time_mode)}\"")
    return int(ttl)


class CompatValueState(_Deletable, PySparkValueState):
    """One tuple per grouping key."""

    def __init__(self, native: ValueState, codec: RowCodec, name: str = "") -> None:
        self._native = native
        self._codec = codec
        self._name = name

    def exists(self) -> bool:
        self._check("checking value state exists")
        return self._native.exists()

    def get(self) -> tuple[Any, ...] | None:
        self._check("getting value state")
        native = self._native
        raw = native.raw()
        if raw is None:
            return None
        value = self._codec.decode_bytes(raw)  # the common case in one step
        if value is not None:
            return value
        stored = native.get(None)
        return None if stored is None else self._codec.decode(stored)

    def update(self, newValue: Any) -> None:
        self._check("updating value state")
        native = self._native
        native.update_raw(self._codec.encode_bytes(newValue, native.expiry_ms()))

    def clear(self) -> None:
        self._check("clearing value state")
        self._native.clear()


class CompatListState(_Deletable, PySparkListState):
    """A list of tuples per grouping key."""

    def __init__(self, native: ListState, codec: RowCodec, name: str = "") -> None:
        self._native = native
        self._codec = codec
        self._name = name

    def exists(self) -> bool:
        self._check("checking list state exists")
        return self._native.exists()

    def get(self) -> Iterator[tuple[Any, ...]]:
        self._check("getting list state")
        decode = self._codec.decode
        return (decode(stored) for stored in self._native.get())

    def put(self, newState: Iterable[Any]) -> None:
        self._check("putting list state")
        encode = self._codec.encode
        self._native.put([encode(value) for value in newState])

    def appendValue(self, newState: Any) -> None:
        self._check("appending value to list state")
        self._native.append_value(self._codec.encode(newState))

    def appendList(self, newState: Iterable[Any]) -> None:
        self._check("appending list to list state")
        encode = self._codec.encode
        self._native.append_list([encode(value) for value in newState])

    def clear(self) -> None:
        self._check("clearing list state")
        self._native.clear()


class CompatMapState(_Deletable, PySparkMapState):
    """A map from key tuples to value tuples per grouping key."""

    def __init__(self, native: MapState, keys: RowCodec, values: RowCodec,
                 name: str = "") -> None:
        self._native = native
        self._keys = keys
        self._values = values
        self._name = name

    def exists(self) -> bool:
        self._check("checking map state exists")
        return self._native.exists()

    def getValue(self, key: Any) -> tuple[Any, ...] | None:
        self._check("getting value")
        stored = self._native.get_value(self._keys.encode(key))
        return None if stored is None else self._values.decode(stored)

    def containsKey(self, key: Any) -> bool:
        self._check("checking if map state contains key")
        return self._native.contains_key(self._keys.encode(key))

    def updateValue(self, key: Any, value: Any) -> None:
        self._check("updating map state value")
        self._native.update_value(self._keys.encode(key), self._values.encode(value))

    def iterator(self) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        self._check("iterating map state")
        keys, values = self._keys.decode, self._values.decode
        return ((keys(k), values(v)) for k, v in self._native.iterator())

    def keys(self) -> Iterator[tuple[Any, ...]]:
        self._check("getting map state keys")
        decode = self._keys.decode
        return (decode(k) for k in self._native.keys())  # noqa: SIM118 - not a dict

    def values(self) -> Iterator[tuple[Any, ...]]:
        self._check("getting map state values")
        decode = self._values.decode
        return (decode(v) for v in self._native.values())

    def removeKey(self, key: Any) -> None:
        self._check("removing key from map state")
        self._native.remove_key(self._keys.encode(key))

    def clear(self) -> None:
        self._check("clearing map state")
        self._native.clear()


class CompatHandle(PySparkHandle):
    """What a PySpark processor's init() receives: PySpark's handle methods, served by this
    backend's handle. `entry` names the call that started the query, for error messages.

    `history`: the checkpoint's state schemas (the driver settles them at start); values are
    then written with the current schema id and read with the schema of theirs. Without it
    (the driver's own check of init(), an import) values are written without an id.
    `declarations` notes what init() declared, for the driver's schema record."""

    def __init__(self, native: StatefulProcessorHandle, schemas: SchemaBook,
                 entry: str, history: SchemaHistory | None = None) -> None:
        self._native = native
        self._schemas = schemas
        self._entry = entry
        self._history = history
        self._declared: dict[str, list[_Deletable]] = {}
        self.declarations: dict[str, StateDeclaration] = {}

    def _declare(self, name: str, variable: Any) -> Any:
        self._declared.setdefault(name, []).append(variable)
        return variable

    def _codec(self, name: str, schema: Any, role: str = "") -> RowCodec:
        what = f"{name} ({role})" if role else name
        return RowCodec(self._schemas.struct(schema, what), what)

    def _value_codec(self, name: str, kind: str, schema: Any, ttl_ms: Any,
                     key_schema: Any = None) -> tuple[RowCodec, int | None]:
        """The codec of a variable's values and its TTL; notes the declaration."""
        what = f"{name} (map value)" if kind == "map" else name
        struct = self._schemas.struct(schema, what)
        plain = RowCodec(struct, what)  # a type state cannot hold fails here, before the TTL
        ttl = ttl_ms_of(name, ttl_ms, self._native.time_mode)
        declared = StateDeclaration(
            kind, canonical_schema(struct),
            None if key_schema is None else canonical_schema(
                self._schemas.struct(key_schema, f"{name} (map key)")),
            ttl is not None)
        self.declarations[name] = declared
        if self._history is None:
            return plain, ttl
        record = self._history.records[self._history.current]
        if record.declarations.variables.get(name) != declared:
            raise StateVariableError(
                f"state {name}: declared here as {kind} state with schema "
                f"{struct.simpleString()}, which is not what init() declared on the driver "
                f"when the query started (schema id {self._history.current}); init() must "
                f"declare the same state every time it runs")
        return VersionedRowCodec(struct, what, self._history.current,
                                 value_schemas(self._history, name)), ttl

    def getValueState(self, stateName: str, schema: Any,
                      ttlDurationMs: int | None = None) -> CompatValueState:
        codec, ttl = self._value_codec(stateName, "value", schema, ttlDurationMs)
        return self._declare(stateName, CompatValueState(
            self._native.declare_state("value", stateName, ttl), codec, stateName))

    def getListState(self, stateName: str, schema: Any,
                     ttlDurationMs: int | None = None) -> CompatListState:
        codec, ttl = self._value_codec(stateName, "list", schema, ttlDurationMs)
        return self._declare(stateName, CompatListState(
            self._native.declare_state("list", stateName, ttl), codec, stateName))

    def getMapState(self, stateName: str, userKeySchema: Any,
                    valueSchema: Any,
                    ttlDurationMs: int | None = None) -> CompatMapState:
        keys = self._codec(stateName, userKeySchema, "map key")
        values, ttl = self._value_codec(stateName, "map", valueSchema, ttlDurationMs,
                                        userKeySchema)
        return self._declare(stateName, CompatMapState(
            self._native.declare_state("map", stateName, ttl), keys, values, stateName))

    def _require_timers(self, call: str) -> None:
        mode = self._native.time_mode
        if mode == "none":
            raise TimerError(f"{call}: timers need timeMode=\"ProcessingTime\" or "
                             f"\"EventTime\" in {self._entry}(...); this query runs with "
                             f"timeMode=\"None\"")

    def registerTimer(self, expiryTimestampMs: int) -> None:
        self._require_timers("registerTimer")
        # PySpark accepts an expiry at or before the watermark and fires it in this batch
        self._native.register_timer(expiryTimestampMs, allow_due=True)

    def deleteTimer(self, expiryTimestampMs: int) -> None:
        self._require_timers("deleteTimer")
        self._native.delete_timer(expiryTimestampMs)

    def listTimers(self) -> Iterator[int]:
        self._require_timers("listTimers")
        return iter(self._native.list_timers())

    def deleteIfExists(self, stateName: str) -> None:
        self._native.delete_state(stateName)
        for variable in self._declared.pop(stateName, []):
            variable._deleted = True
