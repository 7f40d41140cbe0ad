"""Storage contract on memory://, file:// and s3:// (moto behind the proxy), plus
what only one backend promises: atomic local create-only, fsspec, URL dispatch."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
import warnings
from pathlib import Path

import fsspec
import pytest

from pyspark_dstl.changelog.changelog_errors import (
    ChangelogError,
    ObjectExistsError,
    ObjectNotFoundError,
    PermanentStorageError,
    UnsupportedStorageError,
)
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.storage import (
    FsspecStorage,
    LocalStorage,
    MemoryStorage,
    NonAtomicStorageWarning,
    ObjectInfo,
    S3Storage,
    Storage,
    md5_hex,
    open_storage,
)
from pyspark_dstl.core.loop import EventLoopThread
from tests.support import FaultRule, S3Env

DATA = bytes(range(256)) * 40 + b"tail"

# --- the contract, on every backend -------------------------------------------------------------


async def test_create_then_get_returns_the_same_bytes(store: Storage) -> None:
    await store.put_if_absent("state/0/1_a.changelog", DATA)
    assert await store.get("state/0/1_a.changelog") == DATA


async def test_create_returns_the_md5_of_the_content(store: Storage) -> None:
    assert await store.put_if_absent("f", DATA) == md5_hex(DATA)


@pytest.mark.parametrize(("start", "end"), [(0, 10), (7, 300), (300, None), (0, None)])
async def test_ranged_get_returns_that_slice(store: Storage, start: int,
                                             end: int | None) -> None:
    await store.put_if_absent("f", DATA)
    assert await store.get("f", start, end) == DATA[start:end]


async def test_range_reaching_past_the_end_is_cut_at_the_end(store: Storage) -> None:
    await store.put_if_absent("f", DATA)
    assert await store.get("f", len(DATA) - 3, len(DATA) + 100) == DATA[-3:]


async def test_range_starting_past_the_end_is_empty(store: Storage) -> None:
    await store.put_if_absent("f", DATA)
    assert await store.get("f", len(DATA) + 5) == b""


@pytest.mark.parametrize(("start", "end"), [(-1, None), (5, 4)])
async def test_invalid_range_is_rejected(store: Storage, start: int, end: int | None) -> None:
    await store.put_if_absent("f", DATA)
    with pytest.raises(PermanentStorageError, match="range"):
        await store.get("f", start, end)


async def test_get_of_a_missing_object_raises_not_found(store: Storage) -> None:
    with pytest.raises(ObjectNotFoundError) as info:
        await store.get("missing/x")
    assert info.value.path == "missing/x"


async def test_second_create_is_refused_and_keeps_the_first_content(store: Storage) -> None:
    await store.put_if_absent("once", b"first")
    with pytest.raises(ObjectExistsError) as info:
        await store.put_if_absent("once", b"second, longer content")
    assert "once" in str(info.value)
    assert await store.get("once") == b"first"


async def test_list_returns_keys_under_the_prefix_sorted_and_recursive(
        store: Storage) -> None:
    for key in ["b/2", "a/1", "b/sub/3", "b/1", "c/1", "bb/1"]:
        await store.put_if_absent(key, key.encode())
    listed = await store.list("b/")
    assert [info.path for info in listed] == ["b/1", "b/2", "b/sub/3"]
    assert [info.size for info in listed] == [3, 3, 7]


async def test_list_prefix_may_end_inside_a_name(store: Storage) -> None:
    for key in ["s/1_a", "s/1_b", "s/2_a", "s/10_a"]:
        await store.put_if_absent(key, b"x")
    assert [info.path for info in await store.list("s/1")] == ["s/10_a", "s/1_a", "s/1_b"]


async def test_list_without_prefix_returns_everything(store: Storage) -> None:
    for key in ["z", "a/b/c", "m/n"]:
        await store.put_if_absent(key, b"x")
    assert [info.path for info in await store.list()] == ["a/b/c", "m/n", "z"]


async def test_list_of_an_unused_prefix_is_empty(store: Storage) -> None:
    await store.put_if_absent("a/1", b"x")
    assert await store.list("nothing/here/") == []


async def test_delete_removes_the_object_and_is_idempotent(store: Storage) -> None:
    await store.put_if_absent("d/x", b"x")
    await store.delete("d/x")
    await store.delete("d/x")
    await store.delete("never/existed")
    assert not await store.exists("d/x")


async def test_deleted_name_can_be_created_again(store: Storage) -> None:
    await store.put_if_absent("again", b"one")
    await store.delete("again")
    await store.put_if_absent("again", b"two")
    assert await store.get("again") == b"two"


async def test_delete_many_removes_every_listed_key_and_ignores_missing(
        store: Storage) -> None:
    for key in ["k/1", "k/2", "k/3", "keep"]:
        await store.put_if_absent(key, b"x")
    await store.delete_many(["k/1", "k/3", "k/missing"])
    assert [info.path for info in await store.list()] == ["k/2", "keep"]


async def test_head_reports_the_size(store: Storage) -> None:
    await store.put_if_absent("h", DATA)
    info = await store.head("h")
    assert (info.path, info.size) == ("h", len(DATA))


async def test_head_of_a_missing_object_raises_not_found(store: Storage) -> None:
    with pytest.raises(ObjectNotFoundError):
        await store.head("nope")


async def test_holds_is_true_only_for_the_exact_bytes(store: Storage) -> None:
    await store.put_if_absent("h", DATA)
    assert await store.holds("h", DATA)
    assert not await store.holds("h", DATA[:-1] + b"X")
    assert not await store.holds("h", DATA + b"more")
    assert not await store.holds("absent", DATA)


@pytest.mark.parametrize("key", ["", "..", "a/../b", "/abs", "a//b", "a/./b", "a/", "a\\b"])
async def test_invalid_keys_are_rejected_before_any_io(store: Storage, key: str) -> None:
    with pytest.raises(PermanentStorageError, match="invalid storage key"):
        await store.put_if_absent(key, b"x")
    with pytest.raises(PermanentStorageError, match="invalid storage key"):
        await store.get(key)


async def test_removing_incomplete_uploads_keeps_every_complete_object(
        store: Storage) -> None:
    for key in ["state/0/1_a.changelog", "state/0/2_b.snapshot", "commits/0.0"]:
        await store.put_if_absent(key, DATA)
    assert await store.remove_incomplete_uploads("", grace=0.0) == []
    assert [info.path for info in await store.list()] == [
        "commits/0.0", "state/0/1_a.changelog", "state/0/2_b.snapshot"]


@pytest.mark.parametrize("grace", [-1.0, float("nan"), float("inf")])
async def test_removing_incomplete_uploads_refuses_a_bad_grace(store: Storage,
                                                               grace: float) -> None:
    with pytest.raises(PermanentStorageError, match="grace period"):
        await store.remove_incomplete_uploads("", grace=grace)


async def test_url_of_names_the_object_under_the_root(store: Storage) -> None:
    assert store.url_of("a/b") == store.root_url + "/a/b"
    assert not store.root_url.endswith("/")


# --- open_storage --------------------------------------------------------------------------------


def test_file_url_and_plain_paths_open_a_local_store(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    options = ChangelogSettings()
    monkeypatch.chdir(tmp_path)
    by_url = open_storage(tmp_path.as_uri() + "/", options)
    by_path = open_storage(str(tmp_path), options)
    by_relative = open_storage(".", options)
    for store in (by_url, by_path, by_relative):
        assert isinstance(store, LocalStorage)
        assert store.root_url == tmp_path.as_uri()


def test_memory_url_opens_a_memory_store_without_trailing_slash() -> None:
    store = open_storage("memory://shared-name/", ChangelogSettings())
    assert isinstance(store, MemoryStorage)
    assert store.root_url == "memory://shared-name"


@pytest.mark.parametrize("url", ["s3://bucket/some/prefix/", "s3a://bucket/some/prefix"])
def test_s3_urls_open_an_s3_store_with_a_normalised_root(url: str) -> None:
    store = open_storage(url, ChangelogSettings())
    assert isinstance(store, S3Storage)
    assert (store.bucket, store.prefix) == ("bucket", "some/prefix")
    assert store.root_url == "s3://bucket/some/prefix"


def test_other_fsspec_protocols_open_an_fsspec_store(tmp_path: Path) -> None:
    with pytest.warns(NonAtomicStorageWarning):
        store = open_storage(f"local://{tmp_path}/", ChangelogSettings())
    assert isinstance(store, FsspecStorage)
    assert store.root_url == f"local://{tmp_path}"


def test_opening_an_fsspec_store_warns_that_its_create_only_write_is_not_atomic(
        tmp_path: Path) -> None:
    with pytest.warns(NonAtomicStorageWarning) as caught:
        open_storage(f"local://{tmp_path}/", ChangelogSettings())
    message = str(caught[0].message)
    assert message.startswith(f"storage 'local://{tmp_path}': fsspec's ")
    assert "use file:// or s3:// for checkpoints" in message


def test_native_stores_open_without_the_atomicity_warning(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", NonAtomicStorageWarning)
        open_storage(tmp_path.as_uri(), ChangelogSettings())


def test_unknown_scheme_error_names_the_url() -> None:
    url = "nosuchscheme://bucket/path"
    with pytest.raises(UnsupportedStorageError, match="nosuchscheme://bucket/path"):
        open_storage(url, ChangelogSettings())


@pytest.mark.parametrize("url", ["s3:///prefix", "memory://", "s3://bucket/a/../b"])
def test_url_without_a_name_or_with_a_bad_path_is_refused(url: str) -> None:
    with pytest.raises(UnsupportedStorageError, match="storage URL"):
        open_storage(url, ChangelogSettings())


@pytest.mark.parametrize("url", ["file:///tmp/a/../b", "/tmp/a/../b", "rel/../x", "..",
                                 "file:///tmp//x", "file:///tmp/a/.."])
def test_a_local_path_with_a_dotdot_or_empty_part_is_refused(url: str) -> None:
    with pytest.raises(UnsupportedStorageError, match=r"storage URL .*'\.\.' or empty part"):
        open_storage(url, ChangelogSettings())


async def test_local_listing_follows_a_symlinked_folder_like_reads_do(tmp_path: Path) -> None:
    elsewhere = tmp_path / "other-disk" / "0"
    elsewhere.mkdir(parents=True)
    (elsewhere / "1_a.changelog").write_bytes(DATA)
    (tmp_path / "root" / "state" / "op").mkdir(parents=True)
    (tmp_path / "root" / "state" / "op" / "0").symlink_to(elsewhere)
    store = LocalStorage(tmp_path / "root")
    assert await store.get("state/op/0/1_a.changelog") == DATA
    assert [info.path for info in await store.list("state/")] == ["state/op/0/1_a.changelog"]
    await store.delete("state/op/0/1_a.changelog")
    assert not (elsewhere / "1_a.changelog").exists()


async def test_a_folder_reached_twice_through_links_is_refused_by_listing(
        tmp_path: Path) -> None:
    (tmp_path / "root" / "a").mkdir(parents=True)
    (tmp_path / "root" / "a" / "f").write_bytes(DATA)
    (tmp_path / "root" / "a" / "loop").symlink_to(tmp_path / "root" / "a")
    with pytest.raises(PermanentStorageError, match="reached again through a symbolic link"):
        await LocalStorage(tmp_path / "root").list("")


def test_file_url_naming_another_host_is_refused() -> None:
    with pytest.raises(UnsupportedStorageError, match="file://elsewhere/x"):
        open_storage("file://elsewhere/x", ChangelogSettings())


# --- memory -------------------------------------------------------------------------------------


async def test_two_opens_of_one_memory_name_share_objects() -> None:
    name = f"t-{uuid.uuid4().hex}"
    try:
        await open_storage(f"memory://{name}", ChangelogSettings()).put_if_absent("k", b"v")
        assert await open_storage(f"memory://{name}", ChangelogSettings()).get("k") == b"v"
    finally:
        MemoryStorage.drop(name)


async def test_dropping_a_memory_name_forgets_its_objects() -> None:
    name = f"t-{uuid.uuid4().hex}"
    await MemoryStorage(name).put_if_absent("k", b"v")
    MemoryStorage.drop(name)
    assert not await MemoryStorage(name).exists("k")


# --- local --------------------------------------------------------------------------------------


def test_local_create_only_is_atomic_under_eight_racing_threads(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    contents = [bytes([i]) * (256 * 1024 + i) for i in range(8)]
    barrier = threading.Barrier(len(contents))
    outcomes: list[str | None] = [None] * len(contents)

    def race(i: int) -> None:
        barrier.wait()
        try:
            asyncio.run(store.put_if_absent("race/target", contents[i]))
            outcomes[i] = "won"
        except ObjectExistsError:
            outcomes[i] = "exists"

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(contents))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("won") == 1
    assert outcomes.count("exists") == len(contents) - 1
    winner = outcomes.index("won")
    assert (tmp_path / "race" / "target").read_bytes() == contents[winner]
    assert os.listdir(tmp_path / "race") == ["target"]


async def test_local_list_skips_temp_files(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    await store.put_if_absent("d/real", b"x")
    (tmp_path / "d" / ".tmp-leftover").write_bytes(b"partial")
    assert [info.path for info in await store.list()] == ["d/real"]


def leave_temp_file(directory: Path, name: str, age: float) -> Path:
    """What a write killed before its link leaves: a temp file last written `age` s ago."""
    directory.mkdir(parents=True, exist_ok=True)
    temp = directory / name
    temp.write_bytes(b"partial")
    written = time.time() - age
    os.utime(temp, (written, written))
    return temp


async def test_local_removes_temp_files_older_than_the_grace_under_the_prefix(
        tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    await store.put_if_absent("state/0/real", b"x")
    old = leave_temp_file(tmp_path / "state" / "0", ".tmp-old", age=600)
    young = leave_temp_file(tmp_path / "state" / "0", ".tmp-young", age=10)
    elsewhere = leave_temp_file(tmp_path / "state" / "1", ".tmp-old", age=600)
    removed = await store.remove_incomplete_uploads("state/0/", grace=300)
    assert removed == [ObjectInfo("state/0/.tmp-old", len(b"partial"))]
    assert (not old.exists(), young.exists(), elsewhere.exists()) == (True, True, True)
    assert (tmp_path / "state" / "0" / "real").read_bytes() == b"x"


async def test_local_dry_run_reports_old_temp_files_and_keeps_them(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    old = leave_temp_file(tmp_path / "d", ".tmp-old", age=600)
    assert [i.path for i in await store.remove_incomplete_uploads("", 300, dry_run=True)] == [
        "d/.tmp-old"]
    assert old.exists()


async def test_local_temp_files_removal_under_a_missing_directory_finds_nothing(
        tmp_path: Path) -> None:
    assert await LocalStorage(tmp_path).remove_incomplete_uploads("no/such/dir/", 0) == []


async def test_local_create_under_a_file_is_a_permanent_error(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path)
    await store.put_if_absent("a", b"file")
    with pytest.raises(PermanentStorageError, match="parent"):
        await store.put_if_absent("a/b", b"x")


# --- fsspec (through fsspec's local file system) -------------------------------------------------


@pytest.fixture
def fsspec_store(tmp_path: Path) -> FsspecStorage:
    root = tmp_path / "fs"
    root.mkdir()
    with pytest.warns(NonAtomicStorageWarning):
        return FsspecStorage(fsspec.filesystem("file"), str(root), root.as_uri())


async def test_fsspec_create_then_ranged_get(fsspec_store: FsspecStorage) -> None:
    await fsspec_store.put_if_absent("x/y", DATA)
    assert await fsspec_store.get("x/y") == DATA
    assert await fsspec_store.get("x/y", 5, 17) == DATA[5:17]


async def test_fsspec_second_create_is_refused_and_keeps_content(
        fsspec_store: FsspecStorage) -> None:
    await fsspec_store.put_if_absent("once", b"first")
    with pytest.raises(ObjectExistsError):
        await fsspec_store.put_if_absent("once", b"second")
    assert await fsspec_store.get("once") == b"first"


async def test_fsspec_list_is_sorted_recursive_and_skips_temp_files(
        fsspec_store: FsspecStorage, tmp_path: Path) -> None:
    for key in ["b/2", "a/1", "b/sub/3"]:
        await fsspec_store.put_if_absent(key, b"xy")
    (tmp_path / "fs" / "b" / ".tmp-partial").write_bytes(b"p")
    assert [(i.path, i.size) for i in await fsspec_store.list("b/")] == [("b/2", 2),
                                                                         ("b/sub/3", 2)]


async def test_fsspec_removes_temp_files_older_than_the_grace(
        fsspec_store: FsspecStorage, tmp_path: Path) -> None:
    await fsspec_store.put_if_absent("b/real", b"xy")
    old = leave_temp_file(tmp_path / "fs" / "b", ".tmp-old", age=600)
    young = leave_temp_file(tmp_path / "fs" / "b", ".tmp-young", age=10)
    removed = await fsspec_store.remove_incomplete_uploads("b/", grace=300)
    assert removed == [ObjectInfo("b/.tmp-old", len(b"partial"))]
    assert (old.exists(), young.exists()) == (False, True)
    assert [info.path for info in await fsspec_store.list()] == ["b/real"]


async def test_fsspec_delete_head_and_holds(fsspec_store: FsspecStorage) -> None:
    await fsspec_store.put_if_absent("h", DATA)
    assert (await fsspec_store.head("h")).size == len(DATA)
    assert await fsspec_store.holds("h", DATA)
    await fsspec_store.delete("h")
    await fsspec_store.delete("h")
    with pytest.raises(ObjectNotFoundError):
        await fsspec_store.head("h")


# --- S3 specifics -------------------------------------------------------------------------------


async def test_moto_enforces_if_none_match_with_412(s3: S3Env) -> None:
    store = open_storage(s3.url, s3.options)
    try:
        await store.put_if_absent("obj", b"first")
        with pytest.raises(ObjectExistsError, match="412"):
            await store.put_if_absent("obj", b"second")
    finally:
        await store.close()
    assert [r.status for r in s3.proxy.records("PUT")] == [200, 412]
    assert s3.direct_get("obj") == b"first"


async def test_s3_create_stores_the_object_under_the_url_prefix(s3: S3Env) -> None:
    store = open_storage(s3.url, s3.options)
    try:
        await store.put_if_absent("a/b", b"payload")
    finally:
        await store.close()
    assert s3.direct_keys() == ["a/b"]
    assert s3.moto.admin.head_object(Bucket=s3.bucket, Key="root/a/b")["ContentLength"] == 7


async def test_s3_delete_many_sends_one_request_per_chunk(s3: S3Env) -> None:
    store = open_storage(s3.url, s3.options)
    assert isinstance(store, S3Storage)
    store.delete_batch = 2
    keys = [f"k/{i}" for i in range(5)]
    try:
        for key in keys:
            await store.put_if_absent(key, b"x")
        await store.delete_many(keys)
    finally:
        await store.close()
    assert s3.proxy.count("POST", "delete") == 3
    assert s3.direct_keys() == []


async def test_s3_store_on_a_missing_bucket_fails_permanently(s3: S3Env) -> None:
    store = open_storage(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/r", s3.options)
    try:
        with pytest.raises(PermanentStorageError, match="NoSuchBucket"):
            await store.put_if_absent("x", b"x")
    finally:
        await store.close()


def test_s3_store_runs_on_a_background_loop_thread(s3: S3Env,
                                                    loop_thread: EventLoopThread) -> None:
    store = open_storage(s3.url, s3.options)
    loop_thread.run(store.put_if_absent("bg", b"from another thread"))
    assert loop_thread.run(store.get("bg")) == b"from another thread"
    loop_thread.run(store.close())


def test_s3_store_refuses_a_second_event_loop(s3: S3Env, loop_thread: EventLoopThread) -> None:
    store = open_storage(s3.url, s3.options)
    loop_thread.run(store.put_if_absent("first", b"x"))
    with pytest.raises(ChangelogError, match="another event loop"):
        asyncio.run(store.get("first"))
    loop_thread.run(store.close())


async def test_s3_store_refuses_use_after_close(s3: S3Env) -> None:
    store = open_storage(s3.url, s3.options)
    await store.put_if_absent("x", b"x")
    await store.close()
    with pytest.raises(PermanentStorageError, match="closed"):
        await store.get("x")


# --- copy: a create on the storage side ---------------------------------------------------------


async def test_copy_creates_the_destination_with_exactly_the_source_bytes(
        store: Storage) -> None:
    await store.put_if_absent("old/7/1.sst", DATA)
    await store.copy("old/7/1.sst", "new/2/1.sst")
    assert await store.get("new/2/1.sst") == DATA
    assert await store.get("old/7/1.sst") == DATA
    assert (await store.head("new/2/1.sst")).size == len(DATA)


async def test_copy_refuses_an_existing_destination_and_leaves_it_unchanged(
        store: Storage) -> None:
    await store.put_if_absent("a", DATA)
    await store.put_if_absent("b", b"other bytes")
    with pytest.raises(ObjectExistsError):
        await store.copy("a", "b")
    assert await store.get("b") == b"other bytes"


async def test_copy_of_a_missing_source_creates_nothing(store: Storage) -> None:
    with pytest.raises(ObjectNotFoundError):
        await store.copy("absent", "dest")
    assert not await store.exists("dest")


async def test_a_local_copy_is_a_hard_link_of_the_source(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path / "root")
    await store.put_if_absent("s/1.sst", DATA)
    await store.copy("s/1.sst", "d/1.sst")
    assert os.path.samefile(tmp_path / "root" / "s" / "1.sst", tmp_path / "root" / "d" / "1.sst")


def test_an_s3_copy_sends_no_body_and_one_copy_request(s3: S3Env) -> None:
    with ChangelogService(s3.url, s3.options) as storage:
        storage.put("s/1.sst", DATA)
        s3.proxy.reset_log()
        storage.copy("s/1.sst", "d/1.sst")
        assert s3.direct_get("d/1.sst") == DATA
        copies = [r for r in s3.proxy.records("PUT") if "d/1.sst" in r.path]
        assert len(copies) == 1 and s3.proxy.bytes_in("PUT") == 0
        assert storage.metrics_snapshot()["copies"] == 1


def test_a_copy_retried_after_its_applied_answer_was_lost_accepts_its_own_result(
        s3: S3Env) -> None:
    with ChangelogService(s3.url, s3.options) as storage:
        storage.put("s/1.sst", DATA)
        s3.proxy.add_rule(FaultRule("lose_response", method="PUT", path_contains="d/1.sst",
                                    times=1))
        storage.copy("s/1.sst", "d/1.sst")
        assert s3.direct_get("d/1.sst") == DATA
        assert storage.metrics_snapshot()["retries"] >= 1
