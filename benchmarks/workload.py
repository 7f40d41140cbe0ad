"""Keys, values and change sets shared by the state benchmarks, and the two ways to load them.

Keys are b"k" + 11 digits; values are random (incompressible) bytes. Every mode of a
benchmark stores the same physical keys, so RocksDB sees the same data whichever path wrote it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rocksdict import Rdict, WriteBatch, WriteOptions

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.engines.records import encode_key
from pyspark_dstl.backend.engines.rocksdb import RocksDBSettings
from pyspark_dstl.backend.store.api import StateStore
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings

VALUE_SIZE = 100
LOAD_CHUNK = 100_000
OPERATOR = "bench"


def key(index: int) -> bytes:
    return b"k%011d" % index


def physical(user_key: bytes) -> bytes:
    """The key as the backend stores it in RocksDB (default column family prefix)."""
    return encode_key("default", user_key)


@dataclass
class Workload:
    """`keys` live keys; each step rewrites `fraction` of them, chosen uniformly at random."""

    keys: int
    fraction: float
    seed: int
    value_size: int = VALUE_SIZE

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)

    @property
    def changes_per_step(self) -> int:
        return max(1, int(self.keys * self.fraction))

    def values(self, count: int) -> list[bytes]:
        size = self.value_size
        blob = self._rng.bytes(count * size)
        return [blob[i * size:(i + 1) * size] for i in range(count)]

    def initial_chunks(self) -> Iterator[list[tuple[bytes, bytes]]]:
        """Every key with a first value, in ascending chunks."""
        for start in range(0, self.keys, LOAD_CHUNK):
            stop = min(self.keys, start + LOAD_CHUNK)
            yield list(zip([key(i) for i in range(start, stop)], self.values(stop - start),
                           strict=True))

    def step(self) -> list[tuple[bytes, bytes]]:
        """One step's changes: new values for a random `fraction` of the keys."""
        chosen = self._rng.choice(self.keys, size=self.changes_per_step, replace=False)
        return list(zip([key(int(i)) for i in chosen], self.values(len(chosen)),
                        strict=True))

    @property
    def live_bytes(self) -> int:
        """Logical size of the live state: physical key plus value, summed over keys."""
        return self.keys * (len(physical(key(0))) + self.value_size)


def rocksdb_settings() -> RocksDBSettings:
    """The backend's own RocksDB settings, so every mode's LSM tree behaves alike."""
    return RocksDBSettings.from_settings(BackendSettings())


def open_raw_db(path: Path, settings: RocksDBSettings) -> Rdict:
    """A RocksDB opened like the backend opens its own (raw mode, WAL off)."""
    db = Rdict(str(path), settings.options())
    write_options = WriteOptions()
    write_options.disable_wal = True  # type: ignore[method-assign,assignment]
    db.set_write_options(write_options)
    return db


def write_raw(db: Rdict, items: list[tuple[bytes, bytes]]) -> None:
    batch = WriteBatch(raw_mode=True)
    for user_key, value in items:
        batch.put(physical(user_key), value)
    db.write(batch)


def load_store(store: StateStore, workload: Workload) -> float:
    """Put every key through the store API (no commit); seconds taken."""
    started = time.perf_counter()
    for chunk in workload.initial_chunks():
        for user_key, value in chunk:
            store.put(user_key, value)
    return time.perf_counter() - started


def backend_options(local_dir: Path, changelog: ChangelogSettings,
                    materialization: MaterializerSettings | None = None,
                    **changes: Any) -> BackendSettings:
    return BackendSettings(local_dir=str(local_dir), changelog=changelog,
                          materialization=materialization or MaterializerSettings(),
                          **changes)


def file_url(path: Path) -> str:
    path.mkdir(parents=True, exist_ok=True)
    return Path(os.path.abspath(path)).as_uri()
