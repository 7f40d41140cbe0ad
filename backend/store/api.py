"""The provider/store API in Spark's shape, with Python names.

A provider serves one store (one operator partition under one checkpoint location). Each batch
asks it for a store at the committed (version, unique id), writes, and commits version + 1.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark_dstl.backend.engines.records import DEFAULT_CF
from pyspark_dstl.backend.lineage.store_commit import StoreCommit

if TYPE_CHECKING:
    from pyspark_dstl.backend.lineage.context import LocationContext


BytesColumn = Sequence[bytes] | Any
"""A column of bytes: a sequence of bytes, or anything with to_pylist() giving one (an Arrow
binary array, for example)."""


def bytes_column(column: BytesColumn | None, name: str) -> Sequence[bytes]:
    """`column` as a sequence of bytes (Arrow arrays through their to_pylist)."""
    if column is None:
        raise TypeError(f"put_many: {name} is missing (keys and values go together)")
    if isinstance(column, list | tuple):
        return column
    to_pylist = getattr(column, "to_pylist", None)
    listed: list[bytes] = list(column) if to_pylist is None else to_pylist()
    return listed


class StateStore(ABC):
    """One transaction on top of a loaded version; commit() or abort() ends it."""

    @property
    @abstractmethod
    def store_id(self) -> str: ...

    @property
    @abstractmethod
    def version(self) -> int:
        """The version this store was loaded at; commit() produces version + 1."""

    @property
    @abstractmethod
    def unique_id(self) -> str:
        """The id the commit will carry (fresh for every load)."""

    @abstractmethod
    def get(self, key: bytes, cf: str = DEFAULT_CF) -> bytes | None: ...

    @abstractmethod
    def multi_get(self, keys: Iterable[bytes], cf: str = DEFAULT_CF) -> list[bytes | None]: ...

    @abstractmethod
    def put(self, key: bytes, value: bytes, cf: str = DEFAULT_CF) -> None: ...

    @abstractmethod
    def put_many(self, items: Iterable[tuple[bytes, bytes]] = (), cf: str = DEFAULT_CF, *,
                 keys: BytesColumn | None = None, values: BytesColumn | None = None) -> None:
        """put() of every (key, value) item, or of keys[i], values[i] given as columns."""

    @abstractmethod
    def remove(self, key: bytes, cf: str = DEFAULT_CF) -> None: ...

    @abstractmethod
    def remove_many(self, keys: Iterable[bytes], cf: str = DEFAULT_CF) -> None: ...

    @abstractmethod
    def prefix_scan(self, prefix: bytes, cf: str = DEFAULT_CF) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs whose key starts with `prefix`, ascending."""

    @abstractmethod
    def iterator(self, cf: str = DEFAULT_CF) -> Iterator[tuple[bytes, bytes]]: ...

    @abstractmethod
    def column_families(self) -> list[str]:
        """Column families holding at least one key."""

    @abstractmethod
    def commit(self, *, materialize: bool = False) -> StoreCommit:
        """Make the transaction durable as version + 1. `materialize` also snapshots at once
        and builds the checkpoint on that snapshot (before a migration, or to bound replay)."""

    @abstractmethod
    def abort(self) -> None: ...

    @abstractmethod
    def metrics(self) -> Mapping[str, Any]: ...


class StateStoreProvider(ABC):
    @abstractmethod
    def __init__(self, context: LocationContext, store_id: str) -> None:
        """Built by the backend with these arguments; must do no I/O and open no database."""

    @property
    @abstractmethod
    def store_id(self) -> str: ...

    @abstractmethod
    def get_store(self, version: int,
                  unique_id: str | StoreCommit | None = None) -> StateStore:
        """A store at `version`: by (version, unique id) from the store's own files, or by
        the StoreCommit a commit returned. Version 0 without an id is the empty store."""

    @abstractmethod
    def do_maintenance(self) -> None:
        """Background housekeeping (snapshot bookkeeping); safe to call any time."""

    @abstractmethod
    def close(self) -> None: ...
