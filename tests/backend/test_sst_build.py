"""Table files built in columns (backend/engines/sst_build.py), read by real RocksDB: ingested
over existing data, read with checksums verified, compacted, reopened; deletes as tombstones."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from rocksdict import IngestExternalFileOptions, Options, Rdict, ReadOptions

from pyspark_dstl.backend.engines.sst_build import SortedRun, run_items, write_table

Writes = dict[bytes, bytes | None]  # physical key -> value, None: delete


def run_of(prefix: bytes, writes: Writes) -> SortedRun:
    keys = sorted(writes)
    values = [writes[key] or b"" for key in keys]
    key_offsets = np.zeros(len(keys) + 1, np.int64)
    np.cumsum([len(key) for key in keys], out=key_offsets[1:])
    value_offsets = np.zeros(len(keys) + 1, np.int64)
    np.cumsum([len(value) for value in values], out=value_offsets[1:])
    deletes = np.array([writes[key] is None for key in keys], np.bool_)
    return SortedRun(prefix, b"".join(keys), key_offsets, b"".join(values), value_offsets,
                     deletes if deletes.any() else None)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Rdict]:
    made = Rdict(str(tmp_path / "db"), Options(raw_mode=True))
    yield made
    made.close()


def ingest(db: Rdict, path: str) -> None:
    options = IngestExternalFileOptions()
    options.set_move_files(True)
    db.ingest_external_file([path], options)


def everything(db: Rdict) -> dict[bytes, bytes]:
    checked = ReadOptions()
    checked.set_verify_checksums(True)
    return dict(db.items(read_opt=checked))


def random_writes(rng: random.Random, count: int, long_values: bool) -> Writes:
    writes: Writes = {}
    for _ in range(count):
        key = rng.randbytes(rng.randrange(0, 24))
        if rng.random() < 0.25:
            writes[key] = None
        else:
            size = rng.choice([0, 5, 127, 128, 300, 20_000] if long_values else [0, 3, 40])
            writes[key] = rng.randbytes(size)
    return writes


@pytest.mark.parametrize("seed", range(6))
def test_an_ingested_table_replaces_older_values_and_deletes_what_it_deletes(
        db: Rdict, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    runs = {prefix: random_writes(rng, rng.randrange(1, 3000), long_values=seed % 2 == 0)
            for prefix in (b"a\x00", b"b\x00", b"c\x00")}
    expected: dict[bytes, bytes] = {}
    for prefix, writes in runs.items():  # older data under some of the same keys
        for key in list(writes)[::2]:
            db[prefix + key] = b"older"
            expected[prefix + key] = b"older"
    db.flush()
    path = str(tmp_path / "table.sst")
    stats = write_table(path, [run_of(prefix, writes) for prefix, writes in runs.items()],
                        block_size=rng.choice([256, 4096, 32768]))
    ingest(db, path)
    for prefix, writes in runs.items():
        for key, value in writes.items():
            if value is None:
                expected.pop(prefix + key, None)
            else:
                expected[prefix + key] = value
    assert everything(db) == expected
    assert stats.entries == sum(map(len, runs.values()))
    assert stats.deletes == sum(value is None for w in runs.values() for value in w.values())
    for key in rng.sample(sorted(expected), min(50, len(expected))):
        assert db.get(key) == expected[key]


def test_the_table_survives_compaction_and_a_reopen(tmp_path: Path) -> None:
    rng = random.Random(1)
    writes = random_writes(rng, 5000, long_values=True)
    path = str(tmp_path / "table.sst")
    write_table(path, [run_of(b"cf\x00", writes)])
    expected = {b"cf\x00" + key: value for key, value in writes.items() if value is not None}
    db = Rdict(str(tmp_path / "db"), Options(raw_mode=True))
    ingest(db, path)
    db.compact_range(None, None)
    assert everything(db) == expected
    db.close()
    db = Rdict(str(tmp_path / "db"), Options(raw_mode=True))
    assert everything(db) == expected
    db.close()


def test_a_damaged_block_is_refused_by_its_checksum(db: Rdict, tmp_path: Path) -> None:
    writes: Writes = {b"k%05d" % i: b"v" * 50 for i in range(2000)}
    path = str(tmp_path / "table.sst")
    write_table(path, [run_of(b"cf\x00", writes)], block_size=4096)
    with open(path, "r+b") as handle:  # one byte inside the first data block
        handle.seek(100)
        byte = handle.read(1)
        handle.seek(100)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(Exception, match="block checksum mismatch"):  # rocksdict's plain Exception
        ingest(db, path)


def test_run_items_gives_the_keys_and_values_a_table_holds() -> None:
    writes: Writes = {b"b": b"2", b"a": None, b"c": b""}
    keys, values = run_items(run_of(b"p\x00", writes))
    assert keys == [b"p\x00a", b"p\x00b", b"p\x00c"]
    assert values == [None, b"2", b""]


def test_a_table_without_writes_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one write"):
        write_table(str(tmp_path / "empty.sst"), [run_of(b"p\x00", {})])
    assert not os.path.exists(tmp_path / "empty.sst")


def test_a_delete_with_a_value_is_refused(tmp_path: Path) -> None:
    run = run_of(b"p\x00", {b"a": b"value"})
    bad = SortedRun(run.prefix, run.keys, run.key_offsets, run.values, run.value_offsets,
                    np.array([True]))
    with pytest.raises(ValueError, match="delete carries no value"):
        write_table(str(tmp_path / "bad.sst"), [bad])
