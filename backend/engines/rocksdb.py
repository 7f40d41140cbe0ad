"""The RocksDB engine: rocksdict in raw mode, WAL off (the changelog is the durable log)."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from itertools import islice
from typing import TYPE_CHECKING, Any

from rocksdict import (
    BlockBasedOptions,
    Cache,
    Checkpoint,
    DBCompactionStyle,
    IngestExternalFileOptions,
    Options,
    Rdict,
    ReadOptions,
    SstFileWriter,
    UniversalCompactOptions,
    WriteBatch,
    WriteOptions,
)

from pyspark_dstl.backend.backend_errors import BackendError, CorruptCheckpointError
from pyspark_dstl.backend.engines.base import BlockWrite, Engine, TableWrite, Write
from pyspark_dstl.backend.engines.columns import sorted_puts
from pyspark_dstl.backend.engines.records import cf_prefix, prefix_end
from pyspark_dstl.backend.engines.sst_build import SortedRun, run_bytes, write_table

if TYPE_CHECKING:
    from pyspark_dstl.backend.backend_settings import BackendSettings

COMPACTION_STYLES = ("level", "universal")
TABLE_FILE_BYTES = 4 * 1024 * 1024
"""Sorted runs at least this large are written as one table file and ingested
(engines/sst_build.py); smaller ones go through a WriteBatch, so that small replays do not
leave a small file per write in RocksDB's upper levels."""


class RocksDBSettings:
    """Builds Options for every DB of one process; the block cache is shared and made lazily.

    Compaction defaults to RocksDB's own (leveled, dynamic level sizes, base level 256 MB,
    64 MB files, L0 compacted at 4 files). Under random updates they keep a state of a few
    hundred MB in one level that every L0 compaction rewrites whole, so every few snapshots
    are a full new copy in storage. A small base level and small files (e.g. 16 MB, 4 MB, L0
    at 2) make a compaction rewrite only a slice, which lowers the peak of checkpoint storage
    but raises its median and the bytes each snapshot uploads (docs/operations.md has the
    measurements); "universal" is the other style (`universal_max_size_amplification_percent`).
    """

    def __init__(self, write_buffer_size: int, block_cache_size: int,
                 max_background_jobs: int, *, compaction_style: str = "level",
                 max_bytes_for_level_base: int = 256 * 1024 * 1024,
                 target_file_size_base: int = 64 * 1024 * 1024,
                 level0_compaction_trigger: int = 4,
                 universal_max_size_amplification_percent: int = 200) -> None:
        if compaction_style not in COMPACTION_STYLES:
            raise ValueError(f"compaction style must be one of {COMPACTION_STYLES}, "
                             f"got {compaction_style!r}")
        self._write_buffer_size = write_buffer_size
        self._block_cache_size = block_cache_size
        self._max_background_jobs = max_background_jobs
        self._compaction_style = compaction_style
        self._max_bytes_for_level_base = max_bytes_for_level_base
        self._target_file_size_base = target_file_size_base
        self._level0_compaction_trigger = level0_compaction_trigger
        self._universal_amplification = universal_max_size_amplification_percent
        self._cache: Cache | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: BackendSettings) -> RocksDBSettings:
        return cls(settings.write_buffer_size, settings.block_cache_size,
                   settings.max_background_jobs,
                   compaction_style=settings.compaction_style,
                   max_bytes_for_level_base=settings.max_bytes_for_level_base,
                   target_file_size_base=settings.target_file_size_base,
                   level0_compaction_trigger=settings.level0_compaction_trigger,
                   universal_max_size_amplification_percent=(
                       settings.universal_max_size_amplification_percent))

    def options(self, create: bool = True) -> Options:
        with self._lock:
            if self._cache is None:
                self._cache = Cache(self._block_cache_size)
            cache = self._cache
        table = BlockBasedOptions()
        table.set_block_cache(cache)
        # point reads (a batch's multi-get of its keys) skip the files that lack a key: a
        # full-key filter of 10 bits per key, about 1% false positives, as Spark's RocksDB
        table.set_bloom_filter(10, False)
        options = Options(raw_mode=True)
        options.create_if_missing(create)
        options.set_write_buffer_size(self._write_buffer_size)
        options.set_max_background_jobs(self._max_background_jobs)
        options.set_block_based_table_factory(table)
        options.set_target_file_size_base(self._target_file_size_base)
        options.set_level_zero_file_num_compaction_trigger(self._level0_compaction_trigger)
        if self._compaction_style == "universal":
            options.set_compaction_style(DBCompactionStyle.universal())
            universal = UniversalCompactOptions()
            universal.max_size_amplification_percent = self._universal_amplification
            options.set_universal_compaction_options(universal)
        else:
            options.set_compaction_style(DBCompactionStyle.level())
            options.set_level_compaction_dynamic_level_bytes(True)
            options.set_max_bytes_for_level_base(self._max_bytes_for_level_base)
        return options


class RocksDBEngine(Engine):
    LIVE_VIEW = True

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
        self._settings = settings

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

    def apply_tables(self, tables: Iterable[TableWrite]) -> None:
        """One WriteBatch, each table in key order: sorted inserts into the memtable's skip list
        are an order of magnitude faster than random ones, far more than the sort costs when a
        transaction wrote keys in no particular order.
        Sorting the (key, value) items, not the keys, saves a dict lookup per key (half the
        cost of filling the batch on benchmarks/write_path)."""
        batch = WriteBatch(raw_mode=True)
        for prefix, table, may_delete in tables:
            self._fill(batch, prefix, table, may_delete)
        self._db.write(batch)

    @staticmethod
    def _fill(batch: WriteBatch, prefix: bytes, table: Mapping[bytes, bytes | None],
              may_delete: bool) -> None:
        put = batch.put
        items = sorted(table.items())
        if may_delete:
            delete = batch.delete
            for key, value in items:
                if value is None:
                    delete(prefix + key)
                else:
                    put(prefix + key, value)
        else:  # a plain loop: faster here than deque(map(put, ...)) (write_path)
            for key, value in items:
                put(prefix + key, value)  # no deletes here

    def apply_blocks(self, blocks: Iterable[BlockWrite]) -> None:
        """apply_tables(), with the keys of a block of puts of one length prefixed and sorted
        in numpy (columns.sorted_puts): the batch is then filled by a loop of put calls
        alone, as a raw WriteBatch would be."""
        batch = WriteBatch(raw_mode=True)
        put = batch.put
        for block, table in blocks:
            try:
                keys, values = sorted_puts(block, table.values())  # type: ignore[arg-type]
            except ValueError:  # deletes, keys of several lengths: the table path
                self._fill(batch, cf_prefix(block.cf), table, True)
                continue
            for key, value in zip(keys, values, strict=True):
                put(key, value)
        self._db.write(batch)

    def apply_ordered(self, keys: Sequence[bytes], values: Sequence[bytes | None],
                      deletes: bool = True) -> None:
        """One WriteBatch in the given (ascending) key order. Measured against an SST file
        and ingest_external_file for 1e6 sorted 100-byte writes: 0.34 s here, 0.62 s there
        (the ingestion alone 0.31 s), so replay loads through the memtable."""
        batch = WriteBatch(raw_mode=True)
        put = batch.put
        if deletes:
            delete = batch.delete
            for key, value in zip(keys, values, strict=True):
                if value is None:
                    delete(key)
                else:
                    put(key, value)
        else:
            for key, value in zip(keys, values, strict=True):
                put(key, value)
        self._db.write(batch)

    def apply_runs(self, runs: Sequence[SortedRun]) -> None:
        """A table file built in columns (sst_build.py) and ingested whole: no Python call per
        key and no memtable; below TABLE_FILE_BYTES one WriteBatch. The ingestion gives the
        file one sequence number above everything in the DB, so its puts and tombstones
        replace whatever older files hold."""
        runs = [run for run in runs if len(run)]
        if sum(map(run_bytes, runs)) < TABLE_FILE_BYTES:
            super().apply_runs(runs)
            return
        scratch = os.path.join(os.path.dirname(self._path) or ".",
                               f"ingest-{uuid.uuid4().hex}.sst")
        try:
            write_table(scratch, runs)
            ingest = IngestExternalFileOptions()
            ingest.set_move_files(True)
            self._db.ingest_external_file([scratch], ingest)
        except Exception as exc:  # rocksdict raises plain Exception for I/O and order errors
            raise BackendError(f"cannot ingest {sum(map(len, runs))} sorted write(s) into "
                               f"RocksDB at {self._path!r} through {scratch!r}: {exc}") from exc
        finally:
            if os.path.exists(scratch):
                os.remove(scratch)

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

    def scan_chunks(self, prefix: bytes, size: int) -> Iterator[list[tuple[bytes, bytes]]]:
        """Chunks taken from rocksdict's items() bounded above by the prefix's end: the items
        come from Rust a chunk at a time (about 8x the speed of scan() for 100-byte values)."""
        yield from self.range_chunks(prefix, prefix_end(prefix), size)

    def range_chunks(self, start: bytes, end: bytes | None,
                     size: int) -> Iterator[list[tuple[bytes, bytes]]]:
        """Chunks of rocksdict's items() from `start`, bounded above by `end` in RocksDB (no
        bound when None)."""
        options = ReadOptions()
        if end is not None:
            options.set_iterate_upper_bound(end)
        items = self._db.items(from_key=start, read_opt=options)
        try:
            while True:
                chunk: list[tuple[bytes, bytes]] = list(islice(items, size))  # type: ignore[arg-type]
                if not chunk:
                    return
                yield chunk
        finally:
            del items  # a live iterator keeps the DB lock after close()

    def delete_range(self, start: bytes, end: bytes) -> None:
        if start < end:
            self._db.delete_range(start, end)

    def ingest_sorted(self, chunks: Iterable[tuple[list[bytes], list[bytes]]],
                      scratch: str) -> int:
        """One SstFileWriter file, moved into the DB by ingest_external_file: measured against
        WriteBatches for a rescale's copied shares, 4 -> 6 partitions at 1e7 keys, copy +
        flush 1.7 s against 4.8 s (at 1e6, even)."""
        writer = SstFileWriter(self._settings.options())
        count = 0
        try:
            writer.open(scratch)
            for keys, values in chunks:
                for key, value in zip(keys, values, strict=True):
                    writer[key] = value
                count += len(keys)
            if count:
                writer.finish()
                ingest = IngestExternalFileOptions()
                ingest.set_move_files(True)
                self._db.ingest_external_file([scratch], ingest)
        except Exception as exc:  # rocksdict raises plain Exception for I/O and order errors
            raise BackendError(f"cannot ingest {count} key(s) into RocksDB at "
                               f"{self._path!r} through {scratch!r}: {exc}") from exc
        finally:
            del writer
            if os.path.exists(scratch):
                os.remove(scratch)
        return count

    def checkpoint_into(self, directory: str) -> None:
        try:
            self._db.flush(True)
            Checkpoint(self._db).create_checkpoint(directory)
        except Exception as exc:  # rocksdict raises plain Exception for I/O errors
            raise BackendError(f"cannot checkpoint RocksDB at {self._path!r} into "
                               f"{directory!r}: {exc}") from exc

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

    def memory_bytes(self) -> int:
        """Memtables plus the SST files' index and filter blocks held open (the block cache
        is left out: it may be shared between stores)."""
        return sum(int(self._db.property_int_value(name) or 0)
                   for name in ("rocksdb.cur-size-all-mem-tables",
                                "rocksdb.estimate-table-readers-mem"))

    def disk_bytes(self) -> int:
        return int(self._db.property_int_value("rocksdb.total-sst-files-size") or 0)

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
