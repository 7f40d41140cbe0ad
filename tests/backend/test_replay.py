"""Replay's fast path: column decoding of payloads, last-write-wins coalescing of change sets,
the sorted bulk apply of the engines, and reading one group of segments ahead."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import msgpack
import pytest

import pyspark_dstl.backend.engines.rocksdb as rocksdb_engine
import pyspark_dstl.backend.lineage.replay as replay
from pyspark_dstl.backend.backend_errors import BackendError, CorruptCheckpointError, LineageError
from pyspark_dstl.backend.engines.base import Engine
from pyspark_dstl.backend.engines.columns import block_of, encode_blocks
from pyspark_dstl.backend.engines.memory import MemoryEngine
from pyspark_dstl.backend.engines.records import (
    OP_DELETE,
    OP_PUT,
    VersionMarker,
    decode_payload,
    decode_writes,
    encode_key,
    encode_payload,
    physical_keys,
)
from pyspark_dstl.backend.engines.rocksdb import RocksDBEngine, RocksDBSettings
from pyspark_dstl.backend.lineage.loader import StoreLoader
from pyspark_dstl.backend.lineage.rules import MarkerCheck
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.changelog.format import ChangeSet
from tests.support.backend import (
    MEMORY,
    PROVIDER_IDS,
    PROVIDERS,
    BackendEnv,
    file_env,
    state_of,
)

MARKER = [3, 2, "uid2", "uid1"]


def _records(rng: random.Random, count: int, keys: int) -> list[tuple[int, str, bytes,
                                                                     bytes | None]]:
    records: list[tuple[int, str, bytes, bytes | None]] = []
    for _ in range(count):
        cf = rng.choice(["default", "other"])
        key = b"k%d" % rng.randrange(keys)
        if rng.random() < 0.3:
            records.append((OP_DELETE, cf, key, None))
        else:
            records.append((OP_PUT, cf, key, rng.randbytes(rng.randrange(0, 12))))
    return records


@pytest.mark.parametrize("seed", range(5))
def test_column_decoding_gives_decode_payloads_records(seed: int) -> None:
    rng = random.Random(seed)
    marker = VersionMarker(7, "uid7", None if seed == 0 else "uid6")
    records = _records(rng, rng.randrange(0, 50), 10)
    payload = encode_payload(marker, records)
    slow_marker, slow = decode_payload(payload, "here")
    fast_marker, cfs, keys, values = decode_writes(payload, "here")
    assert fast_marker == slow_marker == marker
    assert list(zip(cfs, keys, values, strict=True)) == [(cf, key, value)
                                                         for _, cf, key, value in slow]
    assert physical_keys(cfs, keys) == [encode_key(cf, key) for _, cf, key, _ in slow]


@pytest.mark.parametrize("body", [
    b"\xc1",  # not msgpack
    msgpack.packb([]) ,
    msgpack.packb({"a": 1}),
    msgpack.packb([[OP_PUT, "cf", b"k", b"v"]]),  # no marker
    msgpack.packb([[3, "2", "uid2", None]]),  # marker with a str version
    msgpack.packb([MARKER, [OP_PUT, "cf", b"k"]]),  # three fields
    msgpack.packb([MARKER, [OP_PUT, "cf", b"k", b"v"], 5]),  # not an array
    msgpack.packb([MARKER, [OP_PUT, 1, b"k", b"v"]]),  # cf not a str
    msgpack.packb([MARKER, [OP_PUT, "cf", "k", b"v"]], use_bin_type=True),  # key not bin
    msgpack.packb([MARKER, [OP_PUT, "cf", b"k", None]], use_bin_type=True),  # put of nil
    msgpack.packb([MARKER, [OP_DELETE, "cf", b"k", b"v"]], use_bin_type=True),  # delete + value
    msgpack.packb([MARKER, [7, "cf", b"k", b"v"]], use_bin_type=True),  # unknown op
    msgpack.packb([MARKER, [{"x": 1}, "cf", b"k", b"v"]], use_bin_type=True),  # unhashable op
    msgpack.packb([MARKER, [[1], "cf", b"k", b"v"]], use_bin_type=True),  # array op
    msgpack.packb([MARKER], use_bin_type=True) + b"\x00",  # extra data
], ids=lambda body: repr(body)[:40])
def test_column_decoding_refuses_exactly_what_decode_payload_refuses(body: bytes) -> None:
    with pytest.raises(BackendError) as slow:
        decode_payload(body, "here")
    with pytest.raises(BackendError) as fast:
        decode_writes(body, "here")
    assert type(fast.value) is type(slow.value)
    assert str(fast.value) == str(slow.value)


def test_column_decoding_accepts_what_decode_payload_accepts() -> None:
    # msgpack true equals op 1, as decode_payload's comparison has it
    body = msgpack.packb([MARKER, [True, "cf", b"k", b"v"], [2, "cf", b"d", None]],
                         use_bin_type=True)
    marker, records = decode_payload(body, "here")
    assert decode_writes(body, "here") == (marker, ("cf", "cf"), (b"k", b"d"), (b"v", None))
    assert records == [(OP_PUT, "cf", b"k", b"v"), (OP_DELETE, "cf", b"d", None)]


@pytest.fixture(params=["rocksdb", "rocksdb tables", "memory"])
def engines(request: pytest.FixtureRequest, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Engine, Engine]]:
    """Two empty engines of one kind: one replayed record by record, one coalesced ("rocksdb
    tables": every sorted run written as a table file and ingested, whatever its size)."""
    if request.param == "rocksdb tables":
        monkeypatch.setattr(rocksdb_engine, "TABLE_FILE_BYTES", 0)
    made: list[Engine] = []
    for name in ("sequential", "coalesced"):
        if request.param.startswith("rocksdb"):
            made.append(RocksDBEngine(str(tmp_path / name), RocksDBSettings(1 << 20, 1 << 20, 1)))
        else:
            made.append(MemoryEngine(str(tmp_path / name)))
    yield made[0], made[1]
    for engine in made:
        engine.close()


def _everything(engine: Engine) -> dict[bytes, bytes]:
    return dict(engine.scan(b""))


def _columnar(marker: VersionMarker,
              records: list[tuple[int, str, bytes, bytes | None]]) -> bytes:
    """encode_payload's records as a version-2 payload: a block per run of one cf."""
    blocks = []
    for cf, run in itertools.groupby(records, key=lambda record: record[1]):
        writes = list(run)
        blocks.append(block_of(cf, [key for _, _, key, _ in writes],
                               [value for _, _, _, value in writes], len(writes)))
    return encode_blocks(marker, blocks)


@pytest.mark.parametrize("encode", [encode_payload, _columnar], ids=["version1", "version2"])
@pytest.mark.parametrize("coalesce_bytes", [1, 300, 1 << 30])
def test_coalesced_replay_with_deletes_equals_replaying_every_record_in_order(
        engines: tuple[Engine, Engine], coalesce_bytes: int,
        encode: Callable[[VersionMarker, list[tuple[int, str, bytes, bytes | None]]], bytes],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay, "COALESCE_BYTES", coalesce_bytes)
    sequential, coalesced = engines
    rng = random.Random(coalesce_bytes)
    seed = [(encode_key("default", b"k%d" % i), b"seed") for i in range(12)]
    sequential.apply(seed)
    coalesced.apply(seed)
    chain = [(v, f"uid{v}") for v in range(1, 31)]
    check = MarkerCheck("op/0", (0, None), chain)
    writes = replay.PendingWrites(coalesced)  # flush() waits for its writes
    stats = replay.ReplayStats()
    for sqn, (version, uid) in enumerate(chain):
        marker = VersionMarker(version, uid, chain[version - 2][1] if version > 1 else None)
        written = [_records(rng, rng.randrange(0, 15), 12) for _ in range(rng.randrange(1, 3))]
        payloads = [encode(marker, records) for records in written]
        for records in written:  # the reference: every record in order, one batch each
            sequential.apply((encode_key(cf, key), value) for _, cf, key, value in records)
        change_set = ChangeSet("op/0", sqn, tuple((0, payload) for payload in payloads))
        replay.apply_change_set(writes, change_set, check, f"change set {sqn}", stats)
    writes.flush()
    check.finish("test")
    assert _everything(coalesced) == _everything(sequential)
    assert stats.change_sets == len(chain)


def test_a_key_deleted_last_stays_deleted_and_a_key_put_last_stays(
        engines: tuple[Engine, Engine]) -> None:
    _, engine = engines
    engine.apply([(b"default\x00gone", b"old"), (b"default\x00back", b"old")])
    writes = replay.PendingWrites(engine)
    writes.add([block_of("default", [b"gone", b"back"], [b"new", None], 2)], 10)
    writes.add([block_of("default", [b"gone", b"back", b"never"], [None, b"again", None], 3)],
               10)
    writes.flush()
    assert _everything(engine) == {b"default\x00back": b"again"}


@pytest.mark.parametrize("tables", [False, True], ids=["batches", "tables"])
@pytest.mark.parametrize("provider", PROVIDERS, ids=PROVIDER_IDS)
@pytest.mark.parametrize("group_bytes,coalesce_bytes", [(1, 1), (1, 1 << 30), (1 << 30, 200)])
def test_a_restore_read_in_many_groups_and_coalesced_gives_the_committed_state(
        tmp_path: Path, provider: str, group_bytes: int, coalesce_bytes: int, tables: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if tables:  # every coalesced run ingested as a table file (RocksDB provider)
        monkeypatch.setattr(rocksdb_engine, "TABLE_FILE_BYTES", 0)
    monkeypatch.setattr(replay, "READ_GROUP_BYTES", group_bytes)
    monkeypatch.setattr(replay, "COALESCE_BYTES", coalesce_bytes)
    env = file_env(tmp_path, provider_class=provider)
    try:
        rng = random.Random(3)
        store_provider = env.provider(env.backend())
        model: dict[bytes, bytes] = {}
        info = None
        for version in range(8):
            store = store_provider.get_store(version, info)
            for _ in range(20):
                key = b"k%d" % rng.randrange(15)
                if rng.random() < 0.35:
                    store.remove(key)
                    model.pop(key, None)
                else:
                    model[key] = rng.randbytes(6)
                    store.put(key, model[key])
            info = store.commit()
        assert info is not None
        for by_info in (True, False):
            fresh = env.provider(env.backend()).get_store(
                info.version, info if by_info else info.unique_id)
            assert state_of(fresh) == model
            metrics = fresh.metrics()
            assert metrics["replayed_records"] > 0
            fresh.abort()
    finally:
        env.close()


def test_a_missing_file_in_a_later_group_is_still_a_lineage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay, "READ_GROUP_BYTES", 1)  # one group per segment, read ahead
    env = file_env(tmp_path, provider_class=MEMORY)
    try:
        store_provider = env.provider(env.backend())
        info = None
        for version in range(4):
            store = store_provider.get_store(version, info)
            store.put(b"k%d" % version, b"v")
            info = store.commit()
        assert info is not None
        third = [path for path in env.paths() if path.split("/")[-1].startswith("3_")]
        assert third
        env.delete(third[0])
        with pytest.raises(LineageError, match="of the checkpoint is missing"):
            env.provider(env.backend()).get_store(info.version, info)
    finally:
        env.close()


def _snapshot_then_changelog(env: BackendEnv) -> StoreCommit:
    """A store materialized at version 1, then three commits of changelog."""
    store_provider = env.provider(env.backend())
    store = store_provider.get_store(0, None)
    store.put(b"base", b"v")
    info = store.commit(materialize=True)
    for version in range(1, 4):
        store = store_provider.get_store(version, info)
        store.put(b"k%d" % version, b"v")
        info = store.commit()
    assert info.materialized is not None and info.materialized.version == 1
    return info


def test_the_changelog_read_starts_before_the_snapshot_restore(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = file_env(tmp_path, provider_class=MEMORY)
    try:
        info = _snapshot_then_changelog(env)
        events: list[str] = []
        start_read = replay._start_read
        restore_snapshot = StoreLoader._restore_snapshot

        def read(*args: Any) -> Any:
            events.append("changelog read")
            return start_read(*args)

        def restore(self: StoreLoader, *args: Any) -> Any:
            events.append("snapshot restore")
            return restore_snapshot(self, *args)

        monkeypatch.setattr(replay, "_start_read", read)
        monkeypatch.setattr(StoreLoader, "_restore_snapshot", restore)
        fresh = env.provider(env.backend()).get_store(info.version, info)
        assert state_of(fresh) == {b"base": b"v", b"k1": b"v", b"k2": b"v", b"k3": b"v"}
        fresh.abort()
        assert events == ["changelog read", "snapshot restore"]
    finally:
        env.close()


def test_a_snapshot_that_cannot_be_restored_leaves_no_changelog_read_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = file_env(tmp_path, provider_class=MEMORY)
    try:
        info = _snapshot_then_changelog(env)
        reads: list[Future[Any]] = []

        def never_done(*args: Any) -> Future[Any]:  # a download that has not finished
            reads.append(Future())
            return reads[-1]

        def damaged(self: StoreLoader, *args: Any) -> Any:
            raise CorruptCheckpointError("snapshot 'x': damaged")

        monkeypatch.setattr(replay, "_start_read", never_done)
        monkeypatch.setattr(StoreLoader, "_restore_snapshot", damaged)
        with pytest.raises(CorruptCheckpointError, match="damaged"):
            env.provider(env.backend()).get_store(info.version, info)
        assert len(reads) == 1 and reads[0].cancelled()
    finally:
        env.close()
