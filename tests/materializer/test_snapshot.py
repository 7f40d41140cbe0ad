"""Snapshots of a real RocksDB (rocksdict) to real storage (file://, S3 API), and restores."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from rocksdict import Options, Rdict

from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.materializer import (
    ManifestError,
    MaterializedHandle,
    Materializer,
    MaterializerError,
    MaterializerSettings,
    RemoteFiles,
    SnapshotCorruptError,
    SnapshotNotFoundError,
    SnapshotRequest,
    SnapshotUploadError,
    list_manifests,
    open_db,
)
from tests.support import FaultRule, S3Env

STORE = "op0/part3"
REMOTE_DIR = "state/0/3"
Model = dict[str, dict[bytes, bytes]]


# --- storage -------------------------------------------------------------------------------


@pytest.fixture
def file_remote(tmp_path: Path) -> Iterator[ChangelogService]:
    with ChangelogService((tmp_path / "remote").as_uri(), ChangelogSettings()) as remote:
        yield remote


@pytest.fixture
def s3_remote(s3: S3Env) -> Iterator[ChangelogService]:
    with ChangelogService(s3.url, s3.options) as remote:
        yield remote


@pytest.fixture(params=["file", "s3"])
def remote(request: pytest.FixtureRequest) -> RemoteFiles:
    remote: RemoteFiles = request.getfixturevalue(f"{request.param}_remote")
    return remote


@pytest.fixture
def make_materializer(tmp_path: Path) -> Iterator[Any]:
    created: list[Materializer] = []

    def make(remote: RemoteFiles, name: str = "local", **changes: Any) -> Materializer:
        materializer = Materializer(remote, MaterializerSettings(**changes), str(tmp_path / name))
        materializer.register(STORE, REMOTE_DIR)
        created.append(materializer)
        return materializer

    yield make
    for materializer in created:
        materializer.close()


# --- databases and models ------------------------------------------------------------------


def new_db(path: Path, families: tuple[str, ...] = ()) -> Rdict:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    db = Rdict(str(path), options)
    for family in families:
        db.create_column_family(family, Options(raw_mode=True))
    return db


def family(db: Rdict, name: str) -> Rdict:
    return db if name == "default" else db.get_column_family(name)


def write(db: Rdict, model: Model, name: str, items: dict[bytes, bytes]) -> None:
    target = family(db, name)
    for key, value in items.items():
        target[key] = value
    model.setdefault(name, {}).update(items)


def delete(db: Rdict, model: Model, name: str, keys: list[bytes]) -> None:
    target = family(db, name)
    for key in keys:
        del target[key]
        model[name].pop(key, None)


def contents(db: Rdict, names: list[str]) -> Model:
    return {name: {cast(bytes, k): cast(bytes, v) for k, v in family(db, name).items()}
            for name in names}


def rows(seed: int, count: int, prefix: bytes = b"k", size: int = 100) -> dict[bytes, bytes]:
    rng = random.Random(seed)
    return {prefix + b"%07d" % i: rng.randbytes(size) for i in range(count)}


def request(version: int, unique_id: str, sqn: int = 0, **extra: Any) -> SnapshotRequest:
    return SnapshotRequest(STORE, version, unique_id, sqn, **extra)


def restore_contents(materializer: Materializer, handle: MaterializedHandle,
                     target: Path) -> Model:
    restored = materializer.restore(STORE, handle.manifest_path, str(target))
    db = open_db(restored.db_path, restored.manifest.column_families)
    try:
        return contents(db, list(restored.manifest.column_families))
    finally:
        db.close()


# --- snapshot and restore ------------------------------------------------------------------


def test_snapshot_then_restore_equals_source(remote: RemoteFiles, make_materializer: Any,
                                             tmp_path: Path) -> None:
    materializer = make_materializer(remote)
    db = new_db(tmp_path / "db", ("timers", "lists"))
    model: Model = {}
    write(db, model, "default", rows(1, 3000))
    write(db, model, "timers", rows(2, 500, b"t", 8))
    write(db, model, "lists", rows(3, 200, b"l", 300))
    delete(db, model, "default", [b"k%07d" % i for i in range(0, 3000, 7)])
    handle = materializer.snapshot(db, request(1, "first")).result(timeout=30)
    db.close()
    assert restore_contents(materializer, handle, tmp_path / "restored") == model


def test_background_checkpoint_holds_the_state_of_the_call(file_remote: ChangelogService,
                                                          make_materializer: Any,
                                                          tmp_path: Path) -> None:
    """snapshot_in_background: writes made once `taken` is done are not in the snapshot."""
    materializer = make_materializer(file_remote)
    db = new_db(tmp_path / "db")
    model: Model = {}
    write(db, model, "default", rows(1, 3000))
    expected = {name: dict(items) for name, items in model.items()}
    taken, future = materializer.snapshot_in_background(db, request(1, "first"))
    taken.result(timeout=30)
    write(db, model, "default", rows(2, 3000))  # the next batch, as soon as it may
    delete(db, model, "default", [b"k%07d" % i for i in range(0, 3000, 3)])
    handle = future.result(timeout=30)
    assert model != expected
    assert restore_contents(materializer, handle, tmp_path / "restored") == expected
    db.close()


def test_background_checkpoint_failure_fails_the_snapshot(file_remote: ChangelogService,
                                                          make_materializer: Any,
                                                          tmp_path: Path) -> None:
    materializer = make_materializer(file_remote)
    db = new_db(tmp_path / "db")
    write(db, {}, "default", rows(1, 10))
    db.close()  # a closed DB cannot be checkpointed
    taken, future = materializer.snapshot_in_background(db, request(1, "first"))
    taken.result(timeout=30)
    with pytest.raises(MaterializerError):
        future.result(timeout=30)
    assert materializer.metrics_snapshot()["in_flight"] == 0


def test_manifest_records_request_lineage_metadata_and_key_counts(
        file_remote: ChangelogService, make_materializer: Any, tmp_path: Path) -> None:
    materializer = make_materializer(file_remote)
    db = new_db(tmp_path / "db", ("timers",))
    write(db, {}, "default", rows(1, 400))
    write(db, {}, "timers", rows(2, 30, b"t"))
    lineage = ((4, "a"), (5, "b"))
    handle = materializer.snapshot(db, request(5, "b", sqn=17, lineage=lineage,
                                               metadata={"epoch": 2})).result(timeout=30)
    manifest = materializer.read_manifest(handle.manifest_path)
    assert (manifest.store_id, manifest.version, manifest.unique_id, manifest.sqn) == (
        STORE, 5, "b", 17)
    assert manifest.lineage == lineage
    assert manifest.metadata == {"epoch": 2}
    assert manifest.column_families == ("default", "timers")
    assert manifest.key_counts == {"default": 400, "timers": 30}
    assert handle.manifest_path == f"{REMOTE_DIR}/5_b.snapshot"
    assert handle.total_bytes == manifest.total_bytes == handle.incremental_bytes
    assert handle.file_count == len(manifest.files)


def test_second_snapshot_uploads_only_new_ssts(s3: S3Env, s3_remote: ChangelogService,
                                               make_materializer: Any, tmp_path: Path) -> None:
    materializer = make_materializer(s3_remote)
    db = new_db(tmp_path / "db")
    write(db, {}, "default", rows(1, 20_000))
    first = materializer.snapshot(db, request(1, "u1")).result(timeout=30)
    first_sst_bytes = s3.proxy.bytes_in("PUT", "/sst/")
    s3.proxy.reset_log()
    write(db, {}, "default", rows(2, 50, b"new"))
    second = materializer.snapshot(db, request(2, "u2")).result(timeout=30)
    second_sst_bytes = s3.proxy.bytes_in("PUT", "/sst/")
    assert first_sst_bytes >= first.total_bytes // 2
    assert 0 < second_sst_bytes < first_sst_bytes // 50
    assert second.incremental_bytes < first.incremental_bytes // 20
    assert second.total_bytes > first.total_bytes


def test_reload_of_older_version_never_reuses_changed_content(
        file_remote: ChangelogService, make_materializer: Any, tmp_path: Path) -> None:
    materializer = make_materializer(file_remote)
    db = new_db(tmp_path / "db")
    base: Model = {}
    write(db, base, "default", rows(1, 1000))
    v1 = materializer.snapshot(db, request(1, "v1")).result(timeout=30)
    db.close()
    # Two reloads of v1 go through the same file numbering, so their next SSTs share names.
    branches = []
    for n, seed in ((2, 20), (3, 30)):
        restored = materializer.restore(STORE, v1.manifest_path, str(tmp_path / f"r{n}"))
        branch = open_db(restored.db_path)
        model = {name: dict(items) for name, items in base.items()}
        write(branch, model, "default", rows(seed, 200, b"x"))  # same sizes, new content
        handle = materializer.snapshot(branch, request(n, f"v{n}")).result(timeout=30)
        branch.close()
        branches.append((handle, model))
    (v2, _), (v3, model3) = branches
    files2 = {f.local_name: f for f in materializer.read_manifest(v2.manifest_path).files}
    files3 = {f.local_name: f for f in materializer.read_manifest(v3.manifest_path).files}
    clashing = [name for name in files3 if name.endswith(".sst") and name in files2
                and files2[name].checksum != files3[name].checksum]
    assert clashing, "the scenario must produce one SST name with two contents"
    for name in clashing:
        assert files3[name].dfs_path != files2[name].dfs_path
    assert restore_contents(materializer, v3, tmp_path / "check3") == model3


def test_two_instances_of_one_store_snapshot_concurrently(
        file_remote: ChangelogService, make_materializer: Any, tmp_path: Path) -> None:
    first_attempt = make_materializer(file_remote, "attempt0")
    base_db = new_db(tmp_path / "db")
    base: Model = {}
    write(base_db, base, "default", rows(1, 2000))
    v1 = first_attempt.snapshot(base_db, request(1, "v1")).result(timeout=30)
    base_db.close()
    second_attempt = make_materializer(file_remote, "attempt1")
    running = []
    for n, materializer in enumerate((first_attempt, second_attempt)):
        restored = materializer.restore(STORE, v1.manifest_path, str(tmp_path / f"a{n}"))
        db = open_db(restored.db_path)
        model = {name: dict(items) for name, items in base.items()}
        write(db, model, "default", rows(100 + n, 300, b"attempt"))
        running.append((materializer, db, model))
    futures = [m.snapshot(db, request(2, f"v2-attempt{n}"))
               for n, (m, db, _) in enumerate(running)]
    handles = [future.result(timeout=30) for future in futures]
    for _, db, _ in running:
        db.close()
    assert {h.manifest_path for h in handles} == {
        f"{REMOTE_DIR}/2_v2-attempt0.snapshot", f"{REMOTE_DIR}/2_v2-attempt1.snapshot"}
    checker = make_materializer(file_remote, "checker")
    for n, ((_, _, model), handle) in enumerate(zip(running, handles, strict=True)):
        assert restore_contents(checker, handle, tmp_path / f"check{n}") == model


def test_snapshot_after_compaction_restores(file_remote: ChangelogService, make_materializer: Any,
                                            tmp_path: Path) -> None:
    materializer = make_materializer(file_remote)
    db = new_db(tmp_path / "db")
    model: Model = {}
    before = set()
    for version in range(1, 4):
        write(db, model, "default", rows(version, 800, b"k%d-" % version))
        handle = materializer.snapshot(db, request(version, f"v{version}")).result(timeout=30)
        before |= {f.local_name for f in materializer.read_manifest(handle.manifest_path).files}
    delete(db, model, "default", [k for k in list(model["default"])[::3]])
    db.compact_range(None, None)
    compacted = materializer.snapshot(db, request(4, "v4")).result(timeout=30)
    db.close()
    ssts = {f.local_name for f in materializer.read_manifest(compacted.manifest_path).files
            if f.local_name.endswith(".sst")}
    assert ssts and not ssts & before, "compaction should have rewritten every SST"
    assert restore_contents(materializer, compacted, tmp_path / "restored") == model


def test_restore_second_time_comes_from_the_cache(file_remote: ChangelogService,
                                                  make_materializer: Any,
                                                  tmp_path: Path) -> None:
    writer = make_materializer(file_remote, "writer")
    db = new_db(tmp_path / "db")
    model: Model = {}
    write(db, model, "default", rows(1, 1000))
    handle = writer.snapshot(db, request(1, "v1")).result(timeout=30)
    db.close()
    reader = make_materializer(file_remote, "reader")
    restore_contents(reader, handle, tmp_path / "first")
    downloaded = reader.metrics_snapshot()["restore_files_downloaded"]
    assert restore_contents(reader, handle, tmp_path / "second") == model
    metrics = reader.metrics_snapshot()
    assert metrics["restore_files_downloaded"] == downloaded == handle.file_count
    assert metrics["restore_files_from_cache"] == handle.file_count


def test_checkpoint_directory_is_removed_after_upload(file_remote: ChangelogService,
                                                      make_materializer: Any,
                                                      tmp_path: Path) -> None:
    materializer = make_materializer(file_remote)
    db = new_db(tmp_path / "db")
    write(db, {}, "default", rows(1, 100))
    materializer.snapshot(db, request(1, "v1")).result(timeout=30)
    db.close()
    folders = list((tmp_path / "local" / "checkpoints").iterdir())
    assert len(folders) == 1 and list(folders[0].iterdir()) == []


def test_checkpoints_left_by_a_dead_process_are_swept(file_remote: ChangelogService,
                                                     make_materializer: Any,
                                                     tmp_path: Path) -> None:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
    root = tmp_path / "local" / "checkpoints"
    dead = root / f"{int(finished.stdout)}-0000" / "op-1-abc"
    alive = root / f"{os.getpid()}-1111" / "op-1-def"
    for leftover in (dead, alive):
        leftover.mkdir(parents=True)
        (leftover / "000009.sst").write_bytes(b"pinned")
    make_materializer(file_remote)
    assert not dead.parent.exists()
    assert alive.exists()  # its owner may still be uploading


def test_list_manifests_orders_snapshots_by_version(file_remote: ChangelogService,
                                                    make_materializer: Any,
                                                    tmp_path: Path) -> None:
    materializer = make_materializer(file_remote)
    db = new_db(tmp_path / "db")
    for version, unique_id in ((3, "c"), (1, "a"), (2, "b")):
        write(db, {}, "default", rows(version, 10))
        materializer.snapshot(db, request(version, unique_id)).result(timeout=30)
    db.close()
    assert list_manifests(file_remote, REMOTE_DIR) == [
        (1, "a", f"{REMOTE_DIR}/1_a.snapshot"), (2, "b", f"{REMOTE_DIR}/2_b.snapshot"),
        (3, "c", f"{REMOTE_DIR}/3_c.snapshot")]


def test_metrics_count_uploads_reuses_and_restores(file_remote: ChangelogService,
                                                   make_materializer: Any,
                                                   tmp_path: Path) -> None:
    materializer = make_materializer(file_remote)
    db = new_db(tmp_path / "db")
    write(db, {}, "default", rows(1, 500))
    first = materializer.snapshot(db, request(1, "v1")).result(timeout=30)
    second = materializer.snapshot(db, request(2, "v2")).result(timeout=30)
    db.close()
    materializer.restore(STORE, second.manifest_path, str(tmp_path / "restored"))
    metrics = materializer.metrics_snapshot()
    assert metrics["snapshots_started"] == metrics["snapshots_succeeded"] == 2
    assert metrics["snapshots_failed"] == 0
    assert metrics["bytes_uploaded"] == first.incremental_bytes + second.incremental_bytes
    assert metrics["bytes_reused"] == second.total_bytes - second.incremental_bytes > 0
    assert metrics["files_uploaded"] + metrics["files_reused"] == (
        first.file_count + second.file_count)
    assert metrics["restores"] == 1
    assert metrics["checksum_cache_hits"] > 0  # hard-linked SSTs were not read again


# --- failures and corruption ---------------------------------------------------------------


def test_upload_failing_half_way_leaves_no_manifest_and_retry_succeeds(
        s3: S3Env, s3_remote: ChangelogService, make_materializer: Any, tmp_path: Path) -> None:
    materializer = make_materializer(s3_remote, upload_parallelism=1)
    db = new_db(tmp_path / "db")
    model: Model = {}
    write(db, model, "default", rows(1, 2000))
    s3.proxy.add_rule(FaultRule("status", method="PUT", path_contains="/sst/", status=503,
                                times=1000))
    with pytest.raises(SnapshotUploadError, match=r"\.sst"):
        materializer.snapshot(db, request(1, "v1")).result(timeout=60)
    assert any("/meta/" in key for key in s3.direct_keys())  # it did get half-way
    assert list_manifests(s3_remote, REMOTE_DIR) == []
    s3.proxy.clear_rules()
    handle = materializer.snapshot(db, request(1, "v1")).result(timeout=60)
    db.close()
    assert restore_contents(materializer, handle, tmp_path / "restored") == model


def test_half_snapshot_is_neither_listed_nor_restorable(
        file_remote: ChangelogService, make_materializer: Any, tmp_path: Path) -> None:
    materializer = make_materializer(file_remote)
    manifest = f"{REMOTE_DIR}/1_v1.snapshot"
    os.makedirs(tmp_path / "remote" / manifest)  # the manifest write will fail, files not
    db = new_db(tmp_path / "db")
    write(db, {}, "default", rows(1, 500))
    with pytest.raises(SnapshotUploadError, match="manifest"):
        materializer.snapshot(db, request(1, "v1")).result(timeout=30)
    db.close()
    assert os.listdir(tmp_path / "remote" / REMOTE_DIR / "sst")
    assert list_manifests(file_remote, REMOTE_DIR) == []
    with pytest.raises(SnapshotNotFoundError):
        materializer.restore(STORE, f"{REMOTE_DIR}/1_other.snapshot", str(tmp_path / "r"))


def test_missing_manifest_raises_snapshot_not_found(file_remote: ChangelogService,
                                                    make_materializer: Any,
                                                    tmp_path: Path) -> None:
    materializer = make_materializer(file_remote)
    with pytest.raises(SnapshotNotFoundError, match=r"9_nothing\.snapshot"):
        materializer.restore(STORE, f"{REMOTE_DIR}/9_nothing.snapshot", str(tmp_path / "r"))


def snapshot_small(materializer: Materializer, tmp_path: Path) -> tuple[MaterializedHandle,
                                                                          Model]:
    db = new_db(tmp_path / "db")
    model: Model = {}
    write(db, model, "default", rows(1, 1000))
    handle = materializer.snapshot(db, request(1, "v1")).result(timeout=30)
    db.close()
    return handle, model


def flip_byte(path: Path, offset: int = 100) -> None:
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupted_remote_sst_is_detected_naming_the_file(
        file_remote: ChangelogService, make_materializer: Any, tmp_path: Path) -> None:
    handle, _ = snapshot_small(make_materializer(file_remote, "writer"), tmp_path)
    reader = make_materializer(file_remote, "reader")
    sst = next(f for f in reader.read_manifest(handle.manifest_path).files
               if f.local_name.endswith(".sst"))
    flip_byte(tmp_path / "remote" / sst.dfs_path)
    with pytest.raises(SnapshotCorruptError, match=re.escape(sst.dfs_path)) as caught:
        reader.restore(STORE, handle.manifest_path, str(tmp_path / "restored"))
    assert caught.value.path == sst.dfs_path


def test_corrupted_cache_entry_is_fetched_again(file_remote: ChangelogService,
                                                make_materializer: Any,
                                                tmp_path: Path) -> None:
    writer = make_materializer(file_remote, "writer")
    handle, model = snapshot_small(writer, tmp_path)
    reader = make_materializer(file_remote, "reader")
    reader.restore(STORE, handle.manifest_path, str(tmp_path / "first"))
    shutil.rmtree(tmp_path / "first")  # restored SSTs are hard links of the cache entries
    cache_dir = next((tmp_path / "reader" / "cache").iterdir())
    cached_sst = next(p for p in cache_dir.iterdir() if p.name.endswith(".sst"))
    flip_byte(cached_sst)
    assert restore_contents(reader, handle, tmp_path / "second") == model
    metrics = reader.metrics_snapshot()
    assert metrics["cache_corrupt_entries"] == 1
    assert metrics["restore_files_downloaded"] == handle.file_count + 1


def test_corrupted_manifest_raises_manifest_error(file_remote: ChangelogService,
                                                  make_materializer: Any,
                                                  tmp_path: Path) -> None:
    materializer = make_materializer(file_remote)
    handle, _ = snapshot_small(materializer, tmp_path)
    flip_byte(tmp_path / "remote" / handle.manifest_path, offset=-3)
    with pytest.raises(ManifestError, match="CRC") as caught:
        materializer.restore(STORE, handle.manifest_path, str(tmp_path / "restored"))
    assert caught.value.path == handle.manifest_path


def test_restore_rejects_manifest_of_another_store(file_remote: ChangelogService,
                                                   make_materializer: Any,
                                                   tmp_path: Path) -> None:
    materializer = make_materializer(file_remote)
    handle, _ = snapshot_small(materializer, tmp_path)
    with pytest.raises(ManifestError, match="belongs to store"):
        materializer.restore("op0/part4", handle.manifest_path, str(tmp_path / "restored"))


def test_restore_into_non_empty_directory_is_refused(file_remote: ChangelogService,
                                                     make_materializer: Any,
                                                     tmp_path: Path) -> None:
    materializer = make_materializer(file_remote)
    handle, _ = snapshot_small(materializer, tmp_path)
    target = tmp_path / "busy"
    target.mkdir()
    (target / "CURRENT").write_bytes(b"someone else's DB")
    with pytest.raises(MaterializerError, match="not empty"):
        materializer.restore(STORE, handle.manifest_path, str(target))


def test_reused_file_deleted_remotely_is_uploaded_again(file_remote: ChangelogService,
                                                        make_materializer: Any,
                                                        tmp_path: Path) -> None:
    materializer = make_materializer(file_remote)
    db = new_db(tmp_path / "db")
    model: Model = {}
    write(db, model, "default", rows(1, 1000))
    first = materializer.snapshot(db, request(1, "v1")).result(timeout=30)
    ssts = [f.dfs_path for f in materializer.read_manifest(first.manifest_path).files
            if f.local_name.endswith(".sst")]
    file_remote.loop.run(file_remote.adelete_many(ssts))  # e.g. an over-eager cleanup
    second = materializer.snapshot(db, request(2, "v2")).result(timeout=30)
    db.close()
    assert materializer.metrics_snapshot()["reused_missing"] == len(ssts)
    assert restore_contents(materializer, second, tmp_path / "restored") == model


def test_check_files_finds_nothing_missing_in_a_sound_snapshot(remote: RemoteFiles,
                                                                make_materializer: Any,
                                                                tmp_path: Path) -> None:
    materializer = make_materializer(remote)
    db = new_db(tmp_path / "db")
    write(db, {}, "default", rows(3, 500))
    handle = materializer.snapshot(db, request(1, "v1")).result(timeout=30)
    db.close()
    manifest, missing = materializer.check_files(handle.manifest_path)
    assert (manifest.version, manifest.unique_id) == (1, "v1") and manifest.files
    assert missing == []


def test_check_files_names_the_files_a_cleanup_took(file_remote: ChangelogService,
                                                    make_materializer: Any,
                                                    tmp_path: Path) -> None:
    materializer = make_materializer(file_remote)
    db = new_db(tmp_path / "db")
    write(db, {}, "default", rows(4, 500))
    handle = materializer.snapshot(db, request(1, "v1")).result(timeout=30)
    db.close()
    files = materializer.read_manifest(handle.manifest_path).files
    gone = sorted({next(f.dfs_path for f in files if f.local_name.endswith(".sst")),
                   next(f.dfs_path for f in files if not f.local_name.endswith(".sst"))})
    file_remote.loop.run(file_remote.adelete_many(gone))
    _, missing = materializer.check_files(handle.manifest_path)
    assert sorted(missing) == gone
    assert materializer.metrics_snapshot()["checks_missing_files"] == 1
