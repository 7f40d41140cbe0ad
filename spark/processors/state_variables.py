"""Value, list and map state of one grouping key, stored as msgpack in one column family each.

Expiry is by processing time: `now_ms` is the batch's start time chosen by the driver, so every
attempt of a task sees the same values alive. Expired values are invisible and are removed when
they are next touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyspark_dstl.spark.codec.value_columns import decode_column, encode_column
from pyspark_dstl.spark.codec.values import (
    Expiring,
    decode_key,
    decode_user_key,
    decode_value,
    encode_elements,
    encode_user_key,
    encode_value,
    iter_elements,
)
from pyspark_dstl.spark.keys.key_grouping import KeyGrouping
from pyspark_dstl.spark.keys.keyed_batch import Keys
from pyspark_dstl.spark.spark_errors import StateVariableError
from pyspark_dstl.spark.store_access import StoreAccess
from pyspark_dstl.spark.time.modes import NO_TIME

_MISSING = object()




@dataclass
class KeyContext:
    """What the running task shares with its state variables: the batch's times, the key
    being processed and how to group keys the processor passes. `now_ms` is the batch's
    processing time (the clock of every TTL); `watermark_ms` the event-time watermark timers
    fire at (NO_TIME without event time)."""

    now_ms: int
    current: bytes | None = None
    batch_keys: list[bytes] = field(default_factory=list)
    watermark_ms: int = NO_TIME
    time_mode: str = "none"
    grouping: KeyGrouping | None = None  # key groups of keys a processor passes itself

    def encode_keys(self, keys: Sequence[Sequence[Any]]) -> list[bytes]:
        """Stored bytes of keys a processor passes (a batch's Keys carry theirs already)."""
        return Keys.of(keys, self.grouping).encoded

    def require_current(self, what: str) -> bytes:
        if self.current is None:
            raise StateVariableError(f"state {what}: no current grouping key; per-key access "
                                     f"works inside handle_input_rows, use the *_many methods "
                                     f"in a vectorized processor")
        return self.current


class _StateVariable:
    kind = ""

    def __init__(self, store: StoreAccess, name: str, ttl_ms: int | None,
                 context: KeyContext) -> None:
        self._store = store
        self.name = name
        self.cf = f"{self.kind}/{name}"
        self.ttl_ms = ttl_ms
        self._context = context

    def _expiry(self) -> int | None:
        return None if self.ttl_ms is None else self._context.now_ms + self.ttl_ms

    def forget_cached(self) -> None:
        """Drop values read ahead (the variable's entries were removed behind its back)."""


class ValueState(_StateVariable):
    """One value per grouping key. Reads of a batch's keys are fetched in one multi-get."""

    kind = "value"

    def __init__(self, store: StoreAccess, name: str, ttl_ms: int | None,
                 context: KeyContext) -> None:
        super().__init__(store, name, ttl_ms, context)
        self._prefetched: dict[bytes, bytes | None] | None = None

    def _raw(self, key: bytes) -> bytes | None:
        if self._prefetched is None and self._context.batch_keys:
            keys = self._context.batch_keys
            self._prefetched = dict(zip(keys, self._store.multi_get(keys, self.cf), strict=True))
        if self._prefetched is not None:
            raw = self._prefetched.get(key, _MISSING)
            if raw is not _MISSING:
                return raw  # type: ignore[return-value]
        return self._store.get(key, self.cf)

    def forget_cached(self) -> None:
        self._prefetched = None

    def _remember(self, key: bytes, raw: bytes | None) -> None:
        if self._prefetched is not None:
            self._prefetched[key] = raw

    def _lookup(self, key: bytes) -> tuple[bool, Any]:
        raw = self._raw(key)
        if raw is None:
            return False, None
        alive, value = decode_value(raw, self._context.now_ms, self.name)
        if not alive:
            self._drop_expired(key)
            return False, None
        return True, value

    def _drop_expired(self, key: bytes) -> None:
        """A value read after its TTL ran out is removed then, as Spark's TTL'd state is."""
        self._store.remove(key, self.cf)
        self._remember(key, None)

    def get(self, default: Any = None) -> Any:
        # _lookup's steps inline, the stored bytes from raw(): this runs once per key of a batch
        raw = self.raw()
        if raw is None:
            return default
        alive, value = decode_value(raw, self._context.now_ms, self.name)
        if not alive:
            self._drop_expired(self._context.require_current(self.name))
            return default
        return value

    def exists(self) -> bool:
        return self._lookup(self._context.require_current(self.name))[0]

    def raw(self) -> bytes | None:
        """The current key's stored bytes as they are (None: absent), expiry not looked at:
        for codecs that decode the common case themselves and leave the rest to get()."""
        key = self._context.current
        if key is None:
            key = self._context.require_current(self.name)
        prefetched = self._prefetched
        raw: Any = _MISSING if prefetched is None else prefetched.get(key, _MISSING)
        if raw is _MISSING:
            raw = self._raw(key)
        return raw

    def update_raw(self, raw: bytes) -> None:
        """Store `raw`, already encoded (an expiry included: see `expiry_ms`), as the
        current key's value."""
        key = self._context.current
        if key is None:
            key = self._context.require_current(self.name)
        self._store.put(key, raw, self.cf)
        prefetched = self._prefetched
        if prefetched is not None:
            prefetched[key] = raw

    def expiry_ms(self) -> int | None:
        """When a value written now expires (epoch ms); None without a TTL."""
        return self._expiry()

    def update(self, value: Any) -> None:
        context = self._context
        key = context.current
        if key is None:
            key = context.require_current(self.name)
        ttl_ms = self.ttl_ms
        raw = encode_value(value, None if ttl_ms is None else context.now_ms + ttl_ms, self.name)
        self._store.put(key, raw, self.cf)
        prefetched = self._prefetched
        if prefetched is not None:
            prefetched[key] = raw

    def clear(self) -> None:
        key = self._context.require_current(self.name)
        self._store.remove(key, self.cf)
        self._remember(key, None)

    # ---- bulk access for vectorized processors --------------------------------------------

    def get_many(self, keys: Sequence[Sequence[Any]], default: Any = None) -> list[Any]:
        """The value of every key (`default` where absent or expired), in order."""
        encoded = self._context.encode_keys(keys)
        now, name = self._context.now_ms, self.name
        stored = self._store.multi_get(encoded, self.cf)
        column = decode_column(stored)  # numbers or flags without expiry: a column at once
        if column is not None:
            values, present = column
            result = values.tolist()
            for index in np.flatnonzero(~present).tolist():
                result[index] = default
            return result
        result = []
        expired: list[bytes] = []
        for key, raw in zip(encoded, stored, strict=True):
            if raw is None:
                result.append(default)
                continue
            alive, value = decode_value(raw, now, name)
            if alive:
                result.append(value)
            else:
                result.append(default)
                expired.append(key)
        if expired:
            self._store.remove_many(expired, self.cf)
        return result

    def update_many(self, keys: Sequence[Sequence[Any]], values: Iterable[Any]) -> None:
        encoded = self._context.encode_keys(keys)
        expiry, name = self._expiry(), self.name
        if not isinstance(values, np.ndarray):
            values = list(values)
        if len(values) != len(encoded):
            raise StateVariableError(f"state {name}: update_many got {len(encoded)} keys and "
                                     f"{len(values)} values")
        column = encode_column(values) if expiry is None else None  # a column at once
        if column is None:
            column = [encode_value(value, expiry, name) for value in values]
        self._store.put_many(keys=encoded, values=column, cf=self.cf)

    def clear_many(self, keys: Sequence[Sequence[Any]]) -> None:
        self._store.remove_many(self._context.encode_keys(keys), self.cf)

    def entries(self) -> tuple[Keys, list[Any]]:
        """Every key of the partition that holds a value, with its value (expired values left
        out, and removed): the whole state of the variable, for a vectorized processor."""
        now, name = self._context.now_ms, self.name
        encoded: list[bytes] = []
        values: list[Any] = []
        expired: list[bytes] = []
        for key, raw in self._store.prefix_scan(b"", self.cf):
            alive, value = decode_value(raw, now, name)
            if alive:
                encoded.append(key)
                values.append(value)
            else:
                expired.append(key)
        if expired:
            self._store.remove_many(expired, self.cf)
        return Keys([decode_key(key, name) for key in encoded], encoded), values


class ListState(_StateVariable):
    """A list per grouping key, stored as one concatenation of packed elements."""

    kind = "list"

    def _elements(self, key: bytes) -> list[Any]:
        raw = self._store.get(key, self.cf)
        if raw is None:
            return []
        now = self._context.now_ms
        alive: list[Any] = []
        kept: list[bytes] = []
        expired = False
        for element in iter_elements(raw, self.name):
            if not isinstance(element, Expiring):
                alive.append(element)
                kept.append(encode_value(element, None, self.name))
            elif element.expires_at_ms > now:
                alive.append(element.value)
                kept.append(encode_value(element.value, element.expires_at_ms, self.name))
            else:
                expired = True
        if expired:  # drop expired elements; the others keep their own expiry
            if kept:
                self._store.put(key, b"".join(kept), self.cf)
            else:
                self._store.remove(key, self.cf)
        return alive

    def get(self) -> Iterator[Any]:
        return iter(self._elements(self._context.require_current(self.name)))

    def exists(self) -> bool:
        return bool(self._elements(self._context.require_current(self.name)))

    def put(self, values: Iterable[Any]) -> None:
        key = self._context.require_current(self.name)
        values = list(values)
        if not values:
            self._store.remove(key, self.cf)
            return
        self._store.put(key, encode_elements(values, self._expiry(), self.name), self.cf)

    def append_value(self, value: Any) -> None:
        self.append_list([value])

    def append_list(self, values: Iterable[Any]) -> None:
        key = self._context.require_current(self.name)
        added = encode_elements(list(values), self._expiry(), self.name)
        if not added:
            return
        old = self._store.get(key, self.cf)
        self._store.put(key, added if old is None else old + added, self.cf)

    def clear(self) -> None:
        self._store.remove(self._context.require_current(self.name), self.cf)


class MapState(_StateVariable):
    """A map per grouping key; each entry is stored under grouping key + user key."""

    kind = "map"

    def _entry_key(self, user_key: Any) -> bytes:
        return self._context.require_current(self.name) + encode_user_key(user_key, self.name)

    def _lookup(self, entry_key: bytes) -> tuple[bool, Any]:
        raw = self._store.get(entry_key, self.cf)
        if raw is None:
            return False, None
        alive, value = decode_value(raw, self._context.now_ms, self.name)
        if not alive:
            self._store.remove(entry_key, self.cf)
            return False, None
        return True, value

    def get_value(self, user_key: Any, default: Any = None) -> Any:
        found, value = self._lookup(self._entry_key(user_key))
        return value if found else default

    def contains_key(self, user_key: Any) -> bool:
        return self._lookup(self._entry_key(user_key))[0]

    def update_value(self, user_key: Any, value: Any) -> None:
        self._store.put(self._entry_key(user_key),
                        encode_value(value, self._expiry(), self.name), self.cf)

    def remove_key(self, user_key: Any) -> None:
        self._store.remove(self._entry_key(user_key), self.cf)

    def _entries(self) -> list[tuple[Any, Any]]:
        prefix = self._context.require_current(self.name)
        now, name = self._context.now_ms, self.name
        alive: list[tuple[Any, Any]] = []
        expired: list[bytes] = []
        for entry_key, raw in self._store.prefix_scan(prefix, self.cf):
            live, value = decode_value(raw, now, name)
            if live:
                alive.append((decode_user_key(entry_key[len(prefix):], name), value))
            else:
                expired.append(entry_key)
        if expired:
            self._store.remove_many(expired, self.cf)
        return alive

    def iterator(self) -> Iterator[tuple[Any, Any]]:
        return iter(self._entries())

    def keys(self) -> Iterator[Any]:
        return (key for key, _ in self._entries())

    def values(self) -> Iterator[Any]:
        return (value for _, value in self._entries())

    def exists(self) -> bool:
        return bool(self._entries())

    def clear(self) -> None:
        prefix = self._context.require_current(self.name)
        self._store.remove_many([k for k, _ in self._store.prefix_scan(prefix, self.cf)],
                                self.cf)


STATE_KINDS: dict[str, type[_StateVariable]] = {
    cls.kind: cls for cls in (ValueState, ListState, MapState)
}


def purge_state(store: StoreAccess, name: str) -> int:
    """Remove every entry of the state variable `name`, whatever its kind; the count removed."""
    removed = 0
    for kind in STATE_KINDS:
        cf = f"{kind}/{name}"
        keys = [key for key, _ in store.prefix_scan(b"", cf)]
        if keys:
            store.remove_many(keys, cf)
            removed += len(keys)
    return removed
