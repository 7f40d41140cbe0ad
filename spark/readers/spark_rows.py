"""Stored state as the rows of Spark's `statestore` source: keys, values, TTLs, timers and
`partition_id` as Spark numbers partitions.

Spark's partition of a key is `pmod(hash(grouping columns), numPartitions)`; this backend
routes keys by key groups instead, so `partition_id` is computed from the key's values with
Spark's hash (keys/spark_hash.py), never taken from the state partition that holds the key.
Values are read with the schema history of the batch read (codec/evolution.py), so a value
written under an older schema shows in the schema the read declares.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pyspark_dstl.backend.lineage.schema_records import SchemaHistory
from pyspark_dstl.spark.codec.evolution import VersionedRowCodec
from pyspark_dstl.spark.codec.schema_history import value_schemas, value_struct
from pyspark_dstl.spark.codec.typed_values import RowCodec
from pyspark_dstl.spark.codec.values import (
    Expiring,
    decode_key,
    decode_value_with_expiry,
    iter_elements,
    split_map_key,
)
from pyspark_dstl.spark.keys.spark_hash import partition_of
from pyspark_dstl.spark.readers.statestore_schema import MAP, TIMERS, VALUE, ReadTarget
from pyspark_dstl.spark.time.timers import EXPIRY_WIDTH, expiry_of

UPDATE, APPEND, DELETE = "update", "append", "delete"
Row = tuple[Any, ...]


class RowMaker:
    """Rows of one read target of one operator: `num_partitions` is Spark's partition count
    of the batch (the checkpoint's), `grouped` whether stored keys start with their key group,
    `now_ms` the batch's processing time (values expired at it are left out of state reads,
    as Spark's TTL eviction at the end of that batch removed them; None: no filter)."""

    def __init__(self, target: ReadTarget, history: SchemaHistory | None, key_types: list[str],
                 num_partitions: int, grouped: bool, now_ms: int | None = None) -> None:
        self.target = target
        self.key_types = key_types
        self.num_partitions = num_partitions
        self.grouped = grouped
        self.now_ms = now_ms
        self._values: VersionedRowCodec | None = None
        self._user_keys: RowCodec | None = None
        declaration = target.declaration
        if declaration is not None and history is not None:
            self._values = VersionedRowCodec(value_struct(declaration), target.name,
                                             history.current, value_schemas(history, target.name))
            if declaration.key_schema is not None:
                from pyspark_dstl.spark.readers.statestore_schema import user_key_struct

                self._user_keys = RowCodec(user_key_struct(target), f"{target.name} (map key)")

    # --- pieces -------------------------------------------------------------------------------

    def partition_id(self, key: tuple[Any, ...]) -> int:
        return partition_of(key, self.key_types, self.num_partitions)

    def _shown(self, stored: Any, expires: int | None) -> Any:
        assert self._values is not None
        value = self._values.decode(stored)
        return (value, expires) if self.target.ttl else value

    def _alive(self, expires: int | None) -> bool:
        return expires is None or self.now_ms is None or expires > self.now_ms

    def _elements(self, raw: bytes, filtered: bool) -> list[Any]:
        shown = []
        for element in iter_elements(raw, self.target.name):
            if isinstance(element, Expiring):
                if filtered and not self._alive(element.expires_at_ms):
                    continue
                shown.append(self._shown(element.value, element.expires_at_ms))
            else:
                shown.append(self._shown(element, None))
        return shown

    def _map_key(self, raw: bytes) -> tuple[tuple[Any, ...], Any]:
        assert self._user_keys is not None
        group, user_key = split_map_key(raw, self.target.name, grouped=self.grouped)
        return group, self._user_keys.decode(user_key)

    def _timer(self, raw: bytes) -> tuple[tuple[Any, ...], int]:
        key = decode_key(raw[:-EXPIRY_WIDTH], "timer", grouped=self.grouped)
        return key, expiry_of(raw[-EXPIRY_WIDTH:])

    # --- a state read (one batch) -------------------------------------------------------------

    def state_rows(self, items: Iterable[tuple[bytes, bytes]], flatten: bool) -> Iterator[Row]:
        """Rows of the column family's entries (key, then the value columns, partition_id)."""
        kind, name, grouped = self.target.kind, self.target.name, self.grouped
        if kind == TIMERS:
            for raw, _ in items:
                key, expiry = self._timer(raw)
                yield key, expiry, self.partition_id(key)
            return
        if kind == MAP:
            grouped_by_key: dict[tuple[Any, ...], dict[Any, Any]] = {}
            for raw, stored in items:
                key, user_key = self._map_key(raw)
                value, expires = decode_value_with_expiry(stored, name)
                if not self._alive(expires):
                    continue
                if flatten:
                    yield key, user_key, self._shown(value, expires), self.partition_id(key)
                else:
                    grouped_by_key.setdefault(key, {})[user_key] = self._shown(value, expires)
            for key, entries in grouped_by_key.items():
                yield key, entries, self.partition_id(key)
            return
        for raw, stored in items:
            key = decode_key(raw, name, grouped=grouped)
            if kind == VALUE:
                value, expires = decode_value_with_expiry(stored, name)
                if self._alive(expires):
                    yield key, self._shown(value, expires), self.partition_id(key)
                continue
            elements = self._elements(stored, filtered=True)
            if not elements:
                continue
            if flatten:
                for element in elements:
                    yield key, element, self.partition_id(key)
            else:
                yield key, elements, self.partition_id(key)

    # --- a change feed (one batch's last write of each key) -----------------------------------

    def change_rows(self, batch_id: int, writes: Iterable[tuple[bytes, bytes | None]],
                    whole_lists: bool = False) -> Iterator[Row]:
        """Spark's change rows (batch_id, change_type, key, value columns, partition_id) of
        the batch's writes, each key's last: a put is `update`; a list put is `update` of its
        first element and `append` of each other (Spark's rows for ListState.put), or with
        `whole_lists` one `update` row holding the list; a removal is `delete` with null
        values (a map entry's user key kept, a timer's expiry kept)."""
        kind, name, grouped = self.target.kind, self.target.name, self.grouped
        for raw, stored in writes:
            change = UPDATE if stored is not None else DELETE
            if kind == TIMERS:
                key, expiry = self._timer(raw)
                yield batch_id, change, key, expiry, self.partition_id(key)
            elif kind == MAP:
                key, user_key = self._map_key(raw)
                shown = None if stored is None else self._shown(
                    *decode_value_with_expiry(stored, name))
                yield batch_id, change, key, user_key, shown, self.partition_id(key)
            elif kind == VALUE:
                key = decode_key(raw, name, grouped=grouped)
                shown = None if stored is None else self._shown(
                    *decode_value_with_expiry(stored, name))
                yield batch_id, change, key, shown, self.partition_id(key)
            else:
                key = decode_key(raw, name, grouped=grouped)
                if stored is None:
                    yield batch_id, DELETE, key, None, self.partition_id(key)
                    continue
                elements = self._elements(stored, filtered=False)
                if whole_lists:
                    yield batch_id, UPDATE, key, elements, self.partition_id(key)
                    continue
                for index, element in enumerate(elements):
                    yield (batch_id, UPDATE if index == 0 else APPEND, key, element,
                           self.partition_id(key))
