"""The in-memory engine: a dict; snapshots go through a temporary RocksDB built by SST ingest.

Same snapshot format as the RocksDB engine, so either provider can restore the other's files.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from rocksdict import Options, Rdict, SstFileWriter

from pyspark_dstl.backend.engines.base import Engine, TableWrite, Write
from pyspark_dstl.backend.engines.records import CF_SEPARATOR


class MemoryEngine(Engine):
    def __init__(self, scratch_dir: str, data: dict[bytes, bytes] | None = None) -> None:
        self._data: dict[bytes, bytes] = data if data is not None else {}
        self._scratch_dir = scratch_dir

    @classmethod
    def from_rocksdb(cls, db_path: str, scratch_dir: str) -> MemoryEngine:
        """Load a restored snapshot directory into memory."""
        db = Rdict(db_path, Options(raw_mode=True))
        try:
            # raw mode yields bytes; the stub types keys and values as any scalar
            data: dict[bytes, bytes] = dict(db.items())  # type: ignore[arg-type]
        finally:
            db.close()
        return cls(scratch_dir, data)

    def get(self, raw: bytes) -> bytes | None:
        return self._data.get(raw)

    def multi_get(self, raws: list[bytes]) -> list[bytes | None]:
        return [self._data.get(raw) for raw in raws]

    def apply(self, writes: Iterable[Write]) -> None:
        for raw, value in writes:
            if value is None:
                self._data.pop(raw, None)
            else:
                self._data[raw] = value

    def apply_tables(self, tables: Iterable[TableWrite]) -> None:
        data = self._data
        for prefix, table, may_delete in tables:
            if may_delete:
                self.apply((prefix + key, value) for key, value in table.items())
            else:
                puts: Mapping[bytes, bytes] = table  # type: ignore[assignment]  # no deletes
                data.update(zip(map(prefix.__add__, puts), puts.values(), strict=True))

    def apply_ordered(self, keys: Sequence[bytes], values: Sequence[bytes | None],
                      deletes: bool = True) -> None:
        if deletes:
            self.apply(zip(keys, values, strict=True))
        else:
            self._data.update(zip(keys, values, strict=True))  # type: ignore[arg-type]

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        matching = sorted((k, v) for k, v in self._data.items() if k.startswith(prefix))
        yield from matching

    def first_key_from(self, start: bytes) -> bytes | None:
        return min((k for k in self._data if k >= start), default=None)

    def column_families(self) -> list[str]:
        return sorted({k.partition(CF_SEPARATOR)[0].decode() for k in self._data})

    @contextmanager
    def rocksdb_view(self) -> Iterator[Rdict]:
        directory = os.path.join(self._scratch_dir, f"view-{uuid.uuid4().hex[:12]}")
        os.makedirs(directory)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        db = Rdict(os.path.join(directory, "db"), options)
        try:
            if self._data:
                sst_path = os.path.join(directory, "bulk.sst")
                writer = SstFileWriter(options)
                writer.open(sst_path)
                for key in sorted(self._data):
                    writer[key] = self._data[key]
                writer.finish()
                db.ingest_external_file([sst_path])
            yield db
        finally:
            db.close()
            shutil.rmtree(directory, ignore_errors=True)

    def estimated_keys(self) -> int:
        return len(self._data)

    def memory_bytes(self) -> int:
        """Key and value bytes (Python's per-object overhead is not counted)."""
        return sum(map(len, self._data)) + sum(map(len, self._data.values()))

    def close(self) -> None:
        self._data = {}
