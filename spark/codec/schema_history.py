"""The state schemas a checkpoint was written with: one record per schema id, each naming the
id it was checked against (its base), so the ids a committed batch may hold form one chain.

A record holds every state variable the processor declared at one start (kind, value schema,
map key schema, TTL or not) and the grouping key's schema. Values carry the id they were
written with (codec/evolution.py); the driver compares a start's declarations with every record
of the committed chain and refuses, by name, what could not read the stored values
(`check_against_history`). The file format is in docs/formats.md ("State schema records").
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_dstl.core.checksummed_json import RecordKind
from pyspark_dstl.core.errors import excerpt
from pyspark_dstl.spark.codec.evolution import value_change_problems
from pyspark_dstl.spark.spark_errors import StateSchemaError

MAGIC = "DSTL-STATE-SCHEMA"
FORMAT_VERSION = 1
MAX_RECORD_BYTES = 16 * 1024 * 1024  # a record is read whole: refuse anything larger
RECORD = RecordKind("state schema record", (MAGIC,), "record", FORMAT_VERSION,
                    StateSchemaError, MAX_RECORD_BYTES)

VALUE_EVOLUTION = "STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION"
KEY_CHANGE = "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"
KIND_CHANGE = "STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE"
TTL_CHANGE = "STATE_STORE_INVALID_CONFIG_AFTER_RESTART"


@dataclass(frozen=True)
class StateDeclaration:
    """One state variable as init() declared it; schemas as StructType JSON."""

    kind: str  # "value", "list" or "map"
    value_schema: str
    key_schema: str | None = None  # a map state's user key
    ttl: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "value_schema": json.loads(self.value_schema),
                "key_schema": None if self.key_schema is None else json.loads(self.key_schema),
                "ttl": self.ttl}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StateDeclaration:
        kind = str(data["kind"])
        if kind not in ("value", "list", "map"):
            raise ValueError(f"unknown state kind {kind!r}")
        key = data.get("key_schema")
        return cls(kind, _canonical(data["value_schema"]),
                   None if key is None else _canonical(key), bool(data["ttl"]))

    def value_struct(self) -> Any:
        return _struct(self.value_schema)


@dataclass(frozen=True)
class Declarations:
    """What one start declares: the grouping key's schema and every state variable."""

    grouping_key: str  # StructType JSON of the grouping columns
    variables: Mapping[str, StateDeclaration] = field(default_factory=dict)


@dataclass(frozen=True)
class SchemaRecord:
    """Schema id `schema_id`: the declarations of one start, checked against `base` (None:
    the first record of the checkpoint)."""

    schema_id: int
    base: int | None
    declarations: Declarations
    created_ms: int = 0

    def same_declarations(self, other: Declarations) -> bool:
        return self.declarations == other

    def to_dict(self) -> dict[str, Any]:
        return {"schema_id": self.schema_id, "base": self.base, "created_ms": self.created_ms,
                "grouping_key": json.loads(self.declarations.grouping_key),
                "variables": {name: d.to_dict()
                              for name, d in sorted(self.declarations.variables.items())}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SchemaRecord:
        base = data.get("base")
        variables = {str(name): StateDeclaration.from_dict(d)
                     for name, d in dict(data["variables"]).items()}
        return cls(_whole(data["schema_id"]), None if base is None else _whole(base),
                   Declarations(_canonical(data["grouping_key"]), variables),
                   int(data.get("created_ms", 0)))


def encode_record(record: SchemaRecord) -> bytes:
    return RECORD.encode(record.to_dict())


def decode_record(data: bytes, path: str) -> SchemaRecord:
    """A schema record; StateSchemaError naming the file when it is damaged or foreign."""
    _, body = RECORD.decode(data, path)
    try:
        return SchemaRecord.from_dict(body)
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        raise StateSchemaError(f"state schema record {path!r} is malformed: "
                               f"{excerpt(exc)}") from exc


@dataclass(frozen=True)
class SchemaHistory:
    """The schema id values are written with now, and every record of its chain (the ids
    stored values of committed batches may carry), by id."""

    current: int
    records: Mapping[int, SchemaRecord]

    def chain(self) -> Iterator[SchemaRecord]:
        """Newest first."""
        schema_id: int | None = self.current
        while schema_id is not None:
            record = self.records[schema_id]
            yield record
            schema_id = record.base

    def value_schemas(self, name: str) -> dict[int, Any]:
        """Schema id -> value StructType of every record that declares `name`."""
        return {record.schema_id: record.declarations.variables[name].value_struct()
                for record in self.chain() if name in record.declarations.variables}

    def to_dict(self) -> dict[str, Any]:
        return {"current": self.current,
                "records": [r.to_dict() for r in self.chain()]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SchemaHistory:
        records = [SchemaRecord.from_dict(r) for r in data["records"]]
        return cls(int(data["current"]), {r.schema_id: r for r in records})


def chain_of(records: Mapping[int, SchemaRecord], schema_id: int, where: str) -> SchemaHistory:
    """The history of `schema_id`, every record of its chain present (else StateSchemaError)."""
    seen: set[int] = set()
    step: int | None = schema_id
    while step is not None:
        if step in seen:
            raise StateSchemaError(f"state schema records under {where}: schema id {step} is "
                                   f"its own ancestor; the records are damaged")
        seen.add(step)
        record = records.get(step)
        if record is None:
            raise StateSchemaError(f"state schema record {where + str(step) + '.json'!r} is "
                                   f"missing, but the committed state refers to it (through "
                                   f"schema id {schema_id}); restore the file from a backup")
        step = record.base
    return SchemaHistory(schema_id, {i: records[i] for i in seen})


def check_against_history(history: SchemaHistory, declared: Declarations, where: str) -> None:
    """Refuse, with StateSchemaError, declarations that could not read what the chain's
    records describe: the first problem found, newest record first."""
    for record in history.chain():
        old = record.declarations
        if _key_fields(old.grouping_key) != _key_fields(declared.grouping_key):
            raise StateSchemaError(
                f"grouping key: ({_shown_key(old.grouping_key)}) in the checkpoint, "
                f"({_shown_key(declared.grouping_key)}) now [{KEY_CHANGE}]: stored state is "
                f"found by the bytes of its key, so the grouping columns and their types "
                f"cannot change (schema id {record.schema_id} under {where}); group by the "
                f"old columns again, or start a new checkpoint")
        for name, new in sorted(declared.variables.items()):
            before = old.variables.get(name)
            if before is not None:
                _check_variable(name, before, new, record.schema_id, where)


def _check_variable(name: str, old: StateDeclaration, new: StateDeclaration, schema_id: int,
                    where: str) -> None:
    culprit = f"state variable {name!r}"
    held = f"(schema id {schema_id} under {where})"
    if old.kind != new.kind:
        raise StateSchemaError(
            f"{culprit}: declared as {new.kind} state, held as {old.kind} state [{KIND_CHANGE}]"
            f": a state variable keeps its kind {held}; declare it as {old.kind} state again, "
            f"or give the {new.kind} state another name")
    culprit += f" ({new.kind} state)"
    if old.ttl != new.ttl:
        now, held_as, stored, again = (
            ("without a TTL", "with one", "carry an expiry", "with a TTL") if old.ttl else
            ("with a TTL", "without one", "carry no expiry", "without a TTL"))
        raise StateSchemaError(
            f"{culprit}: declared {now}, held {held_as} [{TTL_CHANGE}]: its stored values "
            f"{stored} {held}; declare it {again} again, or give it another name (a changed "
            f"TTL duration is allowed)")
    if old.key_schema is not None and new.key_schema is not None and \
            _key_fields(old.key_schema) != _key_fields(new.key_schema):
        raise StateSchemaError(
            f"{culprit}, map key: ({_shown_key(old.key_schema)}) held, "
            f"({_shown_key(new.key_schema)}) declared [{KEY_CHANGE}]: map entries are found "
            f"by the bytes of their key {held}; keep the old key schema, or give the map "
            f"state another name")
    problems = value_change_problems(_struct(old.value_schema), _struct(new.value_schema))
    if problems:
        first = problems[0]
        where_field = f", field {first.field!r}" if first.field else ""
        raise StateSchemaError(
            f"{culprit}{where_field}: {first.old} -> {first.new} [{VALUE_EVOLUTION}]: "
            f"{first.reason} {held}; to go on with this schema start a new checkpoint"
            + ("" if len(problems) == 1 else
               f" ({len(problems) - 1} more: "
               + "; ".join(f"{p.field or 'value'}: {p.old} -> {p.new}" for p in problems[1:4])
               + ")"))


def _key_fields(schema_json: str) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in _struct(schema_json).fields]


def _shown_key(schema_json: str) -> str:
    return ", ".join(f"{n} {t}" for n, t in _key_fields(schema_json))


def _struct(schema_json: str) -> Any:
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(schema_json))


def _canonical(value: Any) -> str:
    """A schema's JSON in one spelling (so equal schemas compare equal as text)."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        raise ValueError(f"a schema must be a JSON object, got {excerpt(value)}")
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def canonical_schema(struct: Any) -> str:
    return _canonical(struct.json())


def _whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"a schema id must be a whole number, got {excerpt(value)}")
    return value
