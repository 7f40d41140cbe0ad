"""The slice of a state store that state variables and the timer index use: bytes in, bytes
out, by column family. Both `processors/state_variables.py` and `time/timers.py` are written
against it, so neither depends on the other or on the store's class."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol


class StoreAccess(Protocol):
    """The slice of backend.StateStore the state variables use (bytes in, bytes out)."""

    def get(self, key: bytes, cf: str) -> bytes | None: ...

    def put(self, key: bytes, value: bytes, cf: str) -> None: ...

    def remove(self, key: bytes, cf: str) -> None: ...

    def multi_get(self, keys: Sequence[bytes], cf: str) -> list[bytes | None]: ...

    def put_many(self, items: Iterable[tuple[bytes, bytes]] = (), cf: str = ..., *,
                 keys: Sequence[bytes] | None = None,
                 values: Sequence[bytes] | None = None) -> None: ...

    def remove_many(self, keys: Iterable[bytes], cf: str) -> None: ...

    def prefix_scan(self, prefix: bytes, cf: str) -> Iterator[tuple[bytes, bytes]]: ...
