"""Spark's rules for a checkpoint's state schemas: which declarations may read the values a
schema record's chain describes, and the Spark types behind a record's JSON.

The records themselves (file format, reading, the chain a commit names) are the backend's
(backend/lineage/schema_records.py). Values carry the id they were written with
(codec/evolution.py); the driver compares a start's declarations with every record of the
committed chain and refuses, by name, what could not read the stored values
(`check_against_history`).
"""

from __future__ import annotations

import json
from typing import Any

from pyspark_dstl.backend.lineage.schema_records import (
    Declarations,
    SchemaHistory,
    StateDeclaration,
    canonical_json,
)
from pyspark_dstl.spark.codec.evolution import value_change_problems
from pyspark_dstl.spark.spark_errors import StateSchemaError

VALUE_EVOLUTION = "STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION"
KEY_CHANGE = "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"
KIND_CHANGE = "STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE"
TTL_CHANGE = "STATE_STORE_INVALID_CONFIG_AFTER_RESTART"


def value_struct(declared: StateDeclaration) -> Any:
    """The declared value schema as Spark's StructType."""
    return _struct(declared.value_schema)


def value_schemas(history: SchemaHistory, name: str) -> dict[int, Any]:
    """Schema id -> value StructType of every record of the chain that declares `name`."""
    return {record.schema_id: value_struct(record.declarations.variables[name])
            for record in history.chain() if name in record.declarations.variables}


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


def canonical_schema(struct: Any) -> str:
    return canonical_json(struct.json())
