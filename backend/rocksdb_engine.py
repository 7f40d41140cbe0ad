"""The RocksDB engine: rocksdict in raw mode, WAL off (the changelog is the durable log)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from rocksdict import (
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    WriteBatch,
    WriteOptions,
)

from backend.engine import Engine, Write
from backend.errors import BackendError, CorruptCheckpointError


class RocksDBSettings:
    """Builds Options for every DB of one process; the block cache is shared and made lazily."""

    def __init__(self, write_buffer_size: int, block_cache_size: int,
                 max_background_jobs: int) -> None:
        self._write_buffer_size = write_buffer_size
        self._block_cache_size = block_cache_size
        self._max_background_jobs = max_background_jobs
        self._cache: Cache | None = None
        self._lock = threading.Lock()

    def options(self, create: bool = True) -> Options:
        with self._lock:
            if self._cache is None:
                self._cache = Cache(self._block_cache_size)
            cache = self._cache
        table = BlockBasedOptions()
        table.set_block_cache(cache)
        options = Options(raw_mode=True)
        options.create_if_missing(create)
        options.set_write_buffer_size(self._write_buffer_size)
        options.set_max_background_jobs(self._max_background_jobs)
        options.set_block_based_table_factory(table)
        return options


class RocksDBEngine(Engine):
    def __init__(self, path: str, settings: RocksDBSettings, create: bool = True) -> None:
        """`create=False` for a DB that must already exist (a released one taken over)."""
        try:
            self._db = Rdict(path, settings.options(create))
        except Exception as exc:  # rocksdict raises plain Exception for I/O and lock errors
            raise CorruptCheckpointError(f"cannot open RocksDB at {path!r}: {exc}") from exc
        write_options = WriteOptions()
        # a property at runtime; rocksdict's stub wrongly declares a method
        write_options.disable_wal = True  # type: ignore[method-assign,assignment]
        self._db.set_write_options(write_options)
        self._path = path

    @property
    def path(self) -> str:
        return self._path

    def get(self, raw: bytes) -> bytes | None:
        value: bytes | None = self._db.get(raw)
        return value

    def multi_get(self, raws: list[bytes]) -> list[bytes | None]:
        if not raws:
            return []
        values: Any = self._db.get(list[Any](raws))
        return list(values)

    def apply(self, writes: Iterable[Write]) -> None:
        batch = WriteBatch(raw_mode=True)
        for raw, value in writes:
            if value is None:
                batch.delete(raw)
            else:
                batch.put(raw, value)
        self._db.write(batch)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        iterator = self._db.iter()
        try:
            iterator.seek(prefix)
            while iterator.valid():
                key = iterator.key()
                if not key.startswith(prefix):
                    break
                yield key, iterator.value()
                iterator.next()
        finally:
            del iterator  # a live iterator keeps the DB lock after close()

    def first_key_from(self, start: bytes) -> bytes | None:
        iterator = self._db.iter()
        try:
            iterator.seek(start)
            key: bytes | None = iterator.key() if iterator.valid() else None
            return key
        finally:
            del iterator

    def rocksdb_view(self) -> AbstractContextManager[Rdict]:
        return nullcontext(self._db)

    def estimated_keys(self) -> int:
        return int(self._db.property_int_value("rocksdb.estimate-num-keys") or 0)

    def persist_locally(self) -> bool:
        try:
            self._db.flush(True)
        except Exception as exc:  # rocksdict raises plain Exception for I/O errors
            raise BackendError(f"cannot flush RocksDB at {self._path!r}: {exc}") from exc
        return True

    def close(self) -> None:
        self._db.close()


def remove_db_dir(path: str) -> None:
    """Delete a DB directory the engine no longer uses (after close)."""
    if os.path.isdir(path):
        Rdict.destroy(path, Options(raw_mode=True))
