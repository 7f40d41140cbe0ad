"""ChangelogWriter: SQN rules, persist, truncate, headers and file names, closing (FLIP-158)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from pyspark_dstl.changelog import (
    ChangelogError,
    ChangelogHandle,
    ChangelogService,
    ChangelogSettings,
    SqnError,
    WriterClosedError,
)
from pyspark_dstl.changelog.format import read_file
from pyspark_dstl.changelog.storage.memory import MemoryStorage

Contents = list[tuple[int, tuple[tuple[int, bytes], ...]]]


@pytest.fixture
def storage(storage_url: tuple[str, ChangelogSettings]) -> Iterator[ChangelogService]:
    url, options = storage_url
    with ChangelogService(url, options.with_changes(persist_delay=0.005)) as opened:
        yield opened


@pytest.fixture
def memory_url() -> Iterator[str]:
    name = f"writer-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    MemoryStorage.drop(name)


@pytest.fixture
def mem(memory_url: str) -> Iterator[ChangelogService]:
    with ChangelogService(memory_url, ChangelogSettings(persist_delay=0.005)) as opened:
        yield opened


def contents(storage: ChangelogService, handle: ChangelogHandle) -> Contents:
    return [(cs.sqn, cs.entries) for cs in storage.reader().read(handle)]


# --- SQNs --------------------------------------------------------------------------------------


def test_sqns_start_at_the_initial_sqn(mem: ChangelogService) -> None:
    writer = mem.create_writer("log", initial_sqn=7)
    assert writer.next_sqn() == 7
    writer.append(0, b"x")
    assert writer.next_sqn() == 8


def test_empty_change_set_does_not_advance_the_sqn(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    writer.append(0, b"x")
    first = writer.next_sqn()
    assert writer.next_sqn() == first == 1


def test_appends_after_next_sqn_go_into_a_new_change_set(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    writer.append(0, b"x")
    writer.next_sqn()
    writer.append(0, b"y")
    handle = writer.persist(0).result(10)
    assert contents(mem, handle) == [(0, ((0, b"x"),)), (1, ((0, b"y"),))]


def test_appends_between_rollovers_share_one_sqn(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    writer.append(3, b"x")
    writer.append(1, b"y")
    handle = writer.persist(0).result(10)
    assert contents(mem, handle) == [(0, ((3, b"x"), (1, b"y")))]
    assert handle.segments[0].key_groups == (1, 3)


def test_persist_rolls_over_the_active_change_set(storage: ChangelogService) -> None:
    writer = storage.create_writer("log")
    writer.append(1, b"a")
    first = writer.persist(0)
    writer.append(2, b"b")
    second = writer.persist(0)
    assert (first.result(10).from_sqn, first.result(10).to_sqn) == (0, 1)
    assert contents(storage, first.result(10)) == [(0, ((1, b"a"),))]
    assert contents(storage, second.result(10)) == [(0, ((1, b"a"),)), (1, ((2, b"b"),))]


def test_last_appended_sqn_names_the_newest_change_set_with_changes(
        mem: ChangelogService) -> None:
    writer = mem.create_writer("log", initial_sqn=4)
    assert writer.last_appended_sqn is None
    writer.append(0, b"x")
    assert writer.last_appended_sqn == 4
    writer.next_sqn()
    assert writer.last_appended_sqn == 4


# --- persist -----------------------------------------------------------------------------------


def test_persist_with_nothing_new_returns_an_empty_handle(mem: ChangelogService) -> None:
    writer = mem.create_writer("log", initial_sqn=3)
    handle = writer.persist(3).result(10)
    assert handle.is_empty() and (handle.from_sqn, handle.to_sqn) == (3, 3)
    assert mem.metrics_snapshot()["requests"] == 0


def test_persist_covers_only_the_range_asked_for(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    for payload in (b"a", b"b", b"c"):
        writer.append(0, payload)
        writer.next_sqn()
    handle = writer.persist(1).result(10)
    assert (handle.from_sqn, handle.to_sqn) == (1, 3)
    assert contents(mem, handle) == [(1, ((0, b"b"),)), (2, ((0, b"c"),))]


def test_persisted_change_sets_are_not_uploaded_again(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    writer.append(0, b"a")
    first = writer.persist(0).result(10)
    again = writer.persist(0).result(10)
    writer.append(0, b"b")
    later = writer.persist(0).result(10)
    assert again == first
    assert mem.metrics_snapshot()["uploads"] == 2
    assert later.paths[0] == first.paths[0] and len(later.paths) == 2


def test_handle_merges_change_sets_stored_next_to_each_other(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    for payload in (b"a", b"b", b"c"):
        writer.append(0, payload)
        writer.next_sqn()
    handle = writer.persist(0).result(10)
    assert len(handle.segments) == 1
    assert (handle.segments[0].from_sqn, handle.segments[0].to_sqn) == (0, 3)


def test_persist_below_the_truncated_sqn_raises_sqn_error(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    writer.append(0, b"a")
    writer.truncate(writer.next_sqn())
    with pytest.raises(SqnError, match="truncated"):
        writer.persist(0)


def test_persist_from_a_future_sqn_raises_sqn_error(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    with pytest.raises(SqnError, match="next SQN is 0"):
        writer.persist(1)


async def test_apersist_gives_the_same_handle_as_persist(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    writer.append(5, b"a")
    handle = await writer.apersist(0)
    assert handle == writer.persist(0).result(10)
    assert [cs.entries for cs in await mem.reader().aread(handle)] == [((5, b"a"),)]


# --- truncate ----------------------------------------------------------------------------------


def test_truncate_releases_a_file_once_no_change_set_uses_it(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    writer.append(0, b"a")
    (first,) = writer.persist(0).result(10).paths
    writer.append(0, b"b")
    writer.persist(1).result(10)
    assert writer.truncate(1) == [first]
    assert writer.truncate(1) == []


def test_truncate_keeps_a_file_another_writer_still_uses(memory_url: str) -> None:
    options = ChangelogSettings(persist_delay=0.3)  # long enough for both persists to share it
    with ChangelogService(memory_url, options) as storage:
        one, two = storage.create_writer("one"), storage.create_writer("two")
        one.append(0, b"a")
        two.append(0, b"b")
        first, second = one.persist(0), two.persist(0)
        (path,) = first.result(10).paths
        assert second.result(10).paths == (path,)
        assert one.truncate(1) == []
        assert two.truncate(1) == [path]


def test_truncate_drops_change_sets_not_uploaded_yet(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    writer.append(0, b"a")
    writer.next_sqn()
    writer.append(0, b"b")
    assert writer.truncate(1) == []
    handle = writer.persist(1).result(10)
    _, stored = read_file(mem.get(handle.paths[0]), handle.paths[0])
    assert [(cs.sqn, cs.entries) for cs in stored] == [(1, ((0, b"b"),))]
    assert mem.metrics_snapshot()["uploads"] == 1


def test_truncate_beyond_the_next_sqn_raises_sqn_error(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    with pytest.raises(SqnError, match="next SQN is 0"):
        writer.truncate(1)


# --- headers and file names --------------------------------------------------------------------


def test_header_metadata_goes_into_the_file_header(mem: ChangelogService) -> None:
    writer = mem.create_writer("log", directory="state/0/3")
    lineage = {"version": 7, "unique_id": "ab12", "lineage": [[5, "x"], [6, "y"]]}
    writer.set_header(lineage, label="7_ab12")
    writer.append(0, b"a")
    (path,) = writer.persist(0).result(10).paths
    header, _ = read_file(mem.get(path), path)
    assert path == "state/0/3/7_ab12.changelog"
    assert [(log.log_id, log.metadata) for log in header.logs] == [("log", lineage)]
    assert header.writer_id == mem.writer_id


def test_labelled_writer_numbers_its_later_files(mem: ChangelogService) -> None:
    writer = mem.create_writer("log", directory="d")
    writer.set_header({}, label="7_ab")
    names = []
    for payload in (b"a", b"b", b"c"):
        writer.append(0, payload)
        names.append(writer.persist(writer.lowest_sqn).result(10).paths[-1])
    assert names == ["d/7_ab.changelog", "d/7_ab.1.changelog", "d/7_ab.2.changelog"]


def test_writers_batched_into_one_file_get_a_random_name(memory_url: str) -> None:
    with ChangelogService(memory_url, ChangelogSettings(persist_delay=0.3)) as storage:
        futures = []
        for log_id in ("one", "two"):
            writer = storage.create_writer(log_id, directory="d")
            writer.set_header({}, label=f"label-{log_id}")
            writer.append(0, b"x")
            futures.append(writer.persist(0))
        paths = {future.result(10).paths[0] for future in futures}
    (path,) = paths
    stem = path.removeprefix("d/").removesuffix(".changelog")
    assert len(stem) == 32 and int(stem, 16) >= 0


def test_label_that_is_not_a_file_name_is_rejected(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    with pytest.raises(ChangelogError, match="label 'a/b'"):
        writer.set_header({}, label="a/b")


def test_header_metadata_must_be_msgpack_serializable(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    with pytest.raises(ChangelogError, match="msgpack"):
        writer.set_header({"when": object()})


# --- arguments, writers, closing ---------------------------------------------------------------


def test_append_rejects_a_negative_key_group(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    with pytest.raises(ChangelogError, match="key group"):
        writer.append(-1, b"x")


def test_append_rejects_a_payload_that_is_not_bytes(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    with pytest.raises(TypeError, match="payload must be bytes"):
        writer.append(0, "text")  # type: ignore[arg-type]


def test_second_open_writer_of_one_log_is_rejected(mem: ChangelogService) -> None:
    first = mem.create_writer("log")
    with pytest.raises(ChangelogError, match="already has an open writer"):
        mem.create_writer("log")
    first.close()
    assert mem.create_writer("log").next_sqn() == 0


def test_closed_writer_rejects_every_call(mem: ChangelogService) -> None:
    writer = mem.create_writer("log")
    writer.close()
    calls = [lambda: writer.append(0, b"x"), writer.next_sqn, lambda: writer.persist(0),
             lambda: writer.truncate(0), lambda: writer.set_header({})]
    for call in calls:
        with pytest.raises(WriterClosedError, match="'log' is closed"):
            call()


def test_close_waits_for_the_pending_persist(memory_url: str) -> None:
    with ChangelogService(memory_url, ChangelogSettings(persist_delay=0.2)) as storage:
        writer = storage.create_writer("log")
        writer.append(0, b"a")
        future = writer.persist(0)
        writer.close()
        assert future.done()
        assert contents(storage, future.result()) == [(0, ((0, b"a"),))]


def test_storage_close_uploads_what_is_still_queued(memory_url: str) -> None:
    storage = ChangelogService(memory_url, ChangelogSettings(persist_delay=3600))
    writer = storage.create_writer("log")
    writer.append(0, b"a")
    future = writer.persist(0)
    storage.close()
    handle = future.result(0)
    with ChangelogService(memory_url) as reopened:
        assert contents(reopened, handle) == [(0, ((0, b"a"),))]
    with pytest.raises(WriterClosedError):
        writer.append(0, b"b")
