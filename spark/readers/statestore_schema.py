"""The schemas Spark's `statestore` source gives transformWithState state (Spark 4.x).

`key` is the grouping columns as a struct; a value is the schema its variable declared, and
with a TTL it is wrapped as `{value, ttlExpirationMs}` (each list element and map value on
its own). A list is one row per element (`list_element`) or one row per key (`list_value`,
an array) with `flattenCollectionTypes=false`; a map one row per entry (`user_map_key`,
`user_map_value`) or per key (`map_value`, a map). Timers are `expiration_timestamp_ms`. The
change feed puts `batch_id` and `change_type` in front and always shows collections
flattened. Every field, at every level, is nullable, as Spark shows them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyspark_dstl.backend.lineage.schema_records import StateDeclaration
from pyspark_dstl.spark.codec import schema_history

VALUE, LIST, MAP, TIMERS = "value", "list", "map", "timers"


@dataclass(frozen=True)
class ReadTarget:
    """What one read shows: a state variable (`kind` value, list or map, with its
    declaration) or the timers (`kind` TIMERS, `declaration` None)."""

    name: str
    kind: str
    declaration: StateDeclaration | None

    @property
    def ttl(self) -> bool:
        return self.declaration is not None and self.declaration.ttl

    @property
    def column_family(self) -> str:
        """Where this backend stores it (processors/state_variables.py, time/timers.py)."""
        return "timers/by_key" if self.kind == TIMERS else f"{self.kind}/{self.name}"


def nullable(data_type: Any) -> Any:
    """`data_type` with every field, array element and map value nullable."""
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, nullable(f.dataType), True)
                           for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(nullable(data_type.keyType), nullable(data_type.valueType), True)
    return data_type


def _ttl_wrapped(value: Any) -> Any:
    from pyspark.sql.types import LongType, StructField, StructType

    return StructType([StructField("value", value, True),
                       StructField("ttlExpirationMs", LongType(), True)])


def value_struct(target: ReadTarget) -> Any:
    """A value, list element or map value of the variable, as Spark shows it."""
    assert target.declaration is not None
    shown = nullable(schema_history.value_struct(target.declaration))
    return _ttl_wrapped(shown) if target.ttl else shown


def user_key_struct(target: ReadTarget) -> Any:
    from pyspark.sql.types import StructType

    assert target.declaration is not None and target.declaration.key_schema is not None
    return nullable(StructType.fromJson(json.loads(target.declaration.key_schema)))


def value_columns(target: ReadTarget, flatten: bool) -> list[tuple[str, Any]]:
    """The columns between `key` and `partition_id`."""
    from pyspark.sql.types import ArrayType, LongType, MapType

    if target.kind == TIMERS:
        return [("expiration_timestamp_ms", LongType())]
    if target.kind == VALUE:
        return [("value", value_struct(target))]
    if target.kind == LIST:
        return ([("list_element", value_struct(target))] if flatten
                else [("list_value", ArrayType(value_struct(target), True))])
    if flatten:
        return [("user_map_key", user_key_struct(target)),
                ("user_map_value", value_struct(target))]
    return [("map_value", MapType(user_key_struct(target), value_struct(target), True))]


def state_schema(key: Any, target: ReadTarget, flatten: bool, change_feed: bool,
                 whole_lists: bool = False) -> Any:
    """The whole schema of a read: `key` is the grouping columns' StructType. A change feed
    shows collections flattened, except a list with `whole_lists` (the change stream's
    flattenCollectionTypes=false: one `list_value` per changed key)."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    fields = []
    if change_feed:
        fields += [StructField("batch_id", LongType(), True),
                   StructField("change_type", StringType(), True)]
    fields.append(StructField("key", nullable(key), True))
    flat = flatten or (change_feed and not (whole_lists and target.kind == LIST))
    fields += [StructField(name, data_type, True)
               for name, data_type in value_columns(target, flat)]
    fields.append(StructField("partition_id", IntegerType(), True))
    return StructType(fields)
