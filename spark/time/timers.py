"""Timers per grouping key, kept as state: two column families written like any other state.

`timers/by_expiry` holds expiry + grouping key, so the store's ordered scan yields timers in
expiry order and firing reads only the due ones (O(due timers), never a scan of all keys);
`timers/by_key` holds grouping key + expiry, so listing or deleting one key's timers is a
prefix scan. Both go through the transaction cache and the changelog, so timers are in the
lineage, restored exactly and visible in the state reader.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from pyspark_dstl.spark.spark_errors import TimerError
from pyspark_dstl.spark.store_access import StoreAccess

BY_EXPIRY_CF = "timers/by_expiry"
BY_KEY_CF = "timers/by_key"
TIMER_CFS = (BY_EXPIRY_CF, BY_KEY_CF)

_EXPIRY = struct.Struct(">Q")
EXPIRY_WIDTH = _EXPIRY.size
_OFFSET = 1 << 63  # signed epoch ms -> unsigned, so byte order is time order
MIN_EXPIRY_MS = -(1 << 63)
MAX_EXPIRY_MS = (1 << 63) - 1


def expiry_bytes(expiry_ms: int) -> bytes:
    if isinstance(expiry_ms, bool) or not isinstance(expiry_ms, int):
        try:
            number = int(expiry_ms)
        except (TypeError, ValueError) as exc:
            raise TimerError(f"timer expiry must be epoch milliseconds (an integer), got "
                             f"{expiry_ms!r}") from exc
        if number != expiry_ms:
            raise TimerError(f"timer expiry must be whole epoch milliseconds, got {expiry_ms!r}")
        expiry_ms = number
    if not MIN_EXPIRY_MS <= expiry_ms <= MAX_EXPIRY_MS:
        raise TimerError(f"timer expiry {expiry_ms} is outside the 64-bit millisecond range")
    return _EXPIRY.pack(expiry_ms + _OFFSET)


def expiry_of(data: bytes) -> int:
    (raw,) = _EXPIRY.unpack(data)
    return int(raw) - _OFFSET


class DueTimer(NamedTuple):
    """One timer to fire: the encoded grouping key, the expiry it was registered for, and that
    expiry as stored (so deleting a fired timer encodes nothing again)."""

    key: bytes
    expiry_ms: int
    expiry: bytes


class TimerIndex:
    """Register, delete, list and find due timers of one state store.

    While timers fire, the index remembers which timers were deleted after the due ones were
    read (`watch_deletes`), so the runner can skip a timer an earlier handler deleted without
    reading the store once per timer; the processor's handle must therefore use the same
    index as the runner."""

    def __init__(self, store: StoreAccess) -> None:
        self._store = store
        self._deleted: set[bytes] | None = None  # key + expiry of timers deleted while watched

    def register(self, key: bytes, expiry_ms: int) -> None:
        expiry = expiry_bytes(expiry_ms)
        self._store.put(key + expiry, b"", BY_KEY_CF)
        self._store.put(expiry + key, b"", BY_EXPIRY_CF)
        if self._deleted is not None:
            self._deleted.discard(key + expiry)

    def delete(self, key: bytes, expiry_ms: int) -> None:
        expiry = expiry_bytes(expiry_ms)
        self._store.remove(key + expiry, BY_KEY_CF)
        self._store.remove(expiry + key, BY_EXPIRY_CF)
        if self._deleted is not None:
            self._deleted.add(key + expiry)

    def watch_deletes(self) -> set[bytes]:
        """From now on, record every deleted timer as key + stored expiry (the set returned);
        a later registration of the same timer takes it out again."""
        self._deleted = set()
        return self._deleted

    def delete_fired(self, timer: DueTimer) -> None:
        """Delete one timer `due` returned: its bytes are known, nothing is encoded."""
        self._store.remove(timer.key + timer.expiry, BY_KEY_CF)
        self._store.remove(timer.expiry + timer.key, BY_EXPIRY_CF)
        if self._deleted is not None:
            self._deleted.add(timer.key + timer.expiry)

    def delete_all_fired(self, timers: list[DueTimer]) -> None:
        """Delete every timer `due` returned, with one bulk remove per column family."""
        self._store.remove_many([t.key + t.expiry for t in timers], BY_KEY_CF)
        self._store.remove_many([t.expiry + t.key for t in timers], BY_EXPIRY_CF)
        if self._deleted is not None:
            self._deleted.update(t.key + t.expiry for t in timers)

    def exists(self, key: bytes, expiry_ms: int) -> bool:
        return self._store.get(key + expiry_bytes(expiry_ms), BY_KEY_CF) is not None

    def of_key(self, key: bytes) -> list[int]:
        """Expiries of one key's timers, earliest first (keys are self-delimiting msgpack, so
        a prefix scan never reaches another key's timers)."""
        width = _EXPIRY.size
        return [expiry_of(entry[-width:]) for entry, _ in self._store.prefix_scan(key, BY_KEY_CF)
                if len(entry) == len(key) + width]

    def due(self, threshold_ms: int) -> list[DueTimer]:
        """Every timer with expiry <= threshold, in (expiry, key) order, read once up front so
        timers registered while these fire wait for the next batch."""
        return list(self._iter_due(threshold_ms))

    def _iter_due(self, threshold_ms: int) -> Iterator[DueTimer]:
        width, unpack = _EXPIRY.size, _EXPIRY.unpack
        for entry, _ in self._store.prefix_scan(b"", BY_EXPIRY_CF):
            expiry = entry[:width]
            expiry_ms = unpack(expiry)[0] - _OFFSET
            if expiry_ms > threshold_ms:
                return
            yield DueTimer(entry[width:], expiry_ms, expiry)

    def earliest(self) -> int | None:
        """The earliest registered expiry, or None: what the driver needs to plan a tick."""
        for entry, _ in self._store.prefix_scan(b"", BY_EXPIRY_CF):
            return expiry_of(entry[:_EXPIRY.size])
        return None
