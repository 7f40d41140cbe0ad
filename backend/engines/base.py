"""Engine: where a store instance keeps its state locally (RocksDB or a dict).

The providers differ only in their engine; the changelog, the snapshots (always RocksDB files)
and the lineage rules are shared, so both behave the same from the outside.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager

from rocksdict import Checkpoint, Rdict

from pyspark_dstl.backend.engines.columns import ColumnBlock
from pyspark_dstl.backend.engines.records import CF_SEPARATOR, OP_PUT, cf_prefix
from pyspark_dstl.backend.engines.sst_build import SortedRun, run_items

Write = tuple[bytes, bytes | None]  # physical key, value or None for a delete
# physical key prefix, user key -> value or None for a delete, whether it may hold deletes
TableWrite = tuple[bytes, Mapping[bytes, bytes | None], bool]
# a flush's block of one cf, with the transaction cache's table it was made from
BlockWrite = tuple[ColumnBlock, Mapping[bytes, bytes | None]]


class Engine(ABC):
    """Physical keys are cf + NUL + user key; scans return keys in ascending byte order."""

    # rocksdb_view() hands out the live DB (later writes reach it, so a caller that writes
    # concurrently orders them itself) rather than a copy made when it is entered
    LIVE_VIEW = False

    @abstractmethod
    def get(self, raw: bytes) -> bytes | None: ...

    @abstractmethod
    def multi_get(self, raws: list[bytes]) -> list[bytes | None]: ...

    @abstractmethod
    def apply(self, writes: Iterable[Write]) -> None:
        """Apply the writes atomically, in order."""

    def apply_tables(self, tables: Iterable[TableWrite]) -> None:
        """apply() for the transaction cache's tables (prefix + user key is the physical
        key); keys are unique, so their order does not matter. Engines override it with a
        tight loop (benchmarks/write_path)."""
        self.apply((prefix + key, value)
                   for prefix, table, _ in tables for key, value in table.items())

    def apply_blocks(self, blocks: Iterable[BlockWrite]) -> None:
        """apply_tables() for a flush already encoded as column blocks: each block with the
        cache table it was made from (the values as objects). Engines that can use the
        columns override it (benchmarks/write_path)."""
        self.apply_tables([(cf_prefix(block.cf), table, bool((block.ops != OP_PUT).any()))
                           for block, table in blocks])

    def apply_ordered(self, keys: Sequence[bytes], values: Sequence[bytes | None],
                      deletes: bool = True) -> None:
        """Apply one write per physical key (None: delete), keys given in ascending order,
        atomically: replay's coalesced change sets (lineage/latest.py). `deletes=False`
        promises no None values."""
        self.apply(zip(keys, values, strict=True))

    def apply_runs(self, runs: Sequence[SortedRun]) -> None:
        """Apply sorted runs of writes (ascending physical keys across the runs, each key
        once; deletes as tombstones), atomically: replay's coalesced change sets
        (lineage/latest.py). The RocksDB engine writes large ones as one table file it
        ingests whole."""
        keys: list[bytes] = []
        values: list[bytes | None] = []
        for run in runs:
            run_keys, run_values = run_items(run)
            keys += run_keys
            values += run_values
        if keys:
            self.apply_ordered(keys, values, any(run.deletes is not None for run in runs))

    @abstractmethod
    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every (physical key, value) starting with `prefix`, from a consistent view."""

    def scan_chunks(self, prefix: bytes, size: int) -> Iterator[list[tuple[bytes, bytes]]]:
        """scan(), `size` items at a time: a bulk read (a rescale reads whole stores). Engines
        override it with a read that does not pass through Python per key."""
        chunk: list[tuple[bytes, bytes]] = []
        for item in self.scan(prefix):
            chunk.append(item)
            if len(chunk) >= size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def range_chunks(self, start: bytes, end: bytes,
                     size: int) -> Iterator[list[tuple[bytes, bytes]]]:
        """Every (physical key, value) with start <= key < end, `size` items at a time: a
        rescale copies one key-group range of an old store. Engines override it with a
        bounded read."""
        common = bytes(a for a, _ in _same_start(start, end))
        chunk: list[tuple[bytes, bytes]] = []
        for items in self.scan_chunks(common, size):
            for key, value in items:
                if start <= key < end:
                    chunk.append((key, value))
            if len(chunk) >= size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def delete_range(self, start: bytes, end: bytes) -> None:
        """Delete every physical key with start <= key < end (RocksDB: one range tombstone,
        no key read): how a rescale clips a copy of an old store to a partition's groups."""
        doomed = [key for chunk in self.range_chunks(start, end, 100_000) for key, _ in chunk]
        self.apply_ordered(doomed, [None] * len(doomed))

    def ingest_sorted(self, chunks: Iterable[tuple[list[bytes], list[bytes]]],
                      scratch: str) -> int:
        """Put every (physical keys, values) chunk, keys ascending across all chunks and
        absent from the engine (a rescale's copied share); returns the keys put. RocksDB
        writes them as one SST file at `scratch` and ingests it (no memtable, no flush)."""
        count = 0
        for keys, values in chunks:
            self.apply_ordered(keys, values, deletes=False)
            count += len(keys)
        return count

    def checkpoint_into(self, directory: str) -> None:
        """A RocksDB checkpoint of this state in `directory` (must not exist): memtables
        flushed, files hard-linked, so a second store can start from it without a copy."""
        with self.rocksdb_view() as db:
            db.flush(True)
            Checkpoint(db).create_checkpoint(directory)

    @abstractmethod
    def first_key_from(self, start: bytes) -> bytes | None:
        """The smallest physical key >= start, or None."""

    @abstractmethod
    def rocksdb_view(self) -> AbstractContextManager[Rdict]:
        """A RocksDB holding exactly this state, for the materializer's checkpoint."""

    @abstractmethod
    def estimated_keys(self) -> int: ...

    def memory_bytes(self) -> int:
        """Bytes the engine holds in memory for this state (0 when it cannot tell)."""
        return 0

    def disk_bytes(self) -> int:
        """Bytes of the engine's local files for this state (0 when it keeps none)."""
        return 0

    def persist_locally(self) -> bool:
        """Write everything held in memory to the local files (WAL is off, so RocksDB's
        memtable must be flushed) before another process takes the files over; False when
        the engine keeps its state only in memory and cannot be taken over."""
        return False

    @abstractmethod
    def close(self) -> None: ...

    def column_families(self) -> list[str]:
        """Names of the column families holding at least one key, by seeking past each."""
        names: list[str] = []
        key = self.first_key_from(b"")
        while key is not None:
            cf, sep, _ = key.partition(CF_SEPARATOR)
            if not sep:
                break
            names.append(cf.decode())
            key = self.first_key_from(cf + b"\x01")
        return names


def _same_start(start: bytes, end: bytes) -> Iterator[tuple[int, int]]:
    """The leading bytes `start` and `end` share."""
    for a, b in zip(start, end, strict=False):
        if a != b:
            return
        yield a, b
