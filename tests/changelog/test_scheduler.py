"""The batching scheduler: one request for writers persisting together, thresholds, backpressure."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from pyspark_dstl.changelog import ChangelogService, ChangelogSettings
from pyspark_dstl.changelog.format import read_file
from pyspark_dstl.changelog.storage.memory import MemoryStorage
from tests.support import FaultRule, S3Env

KB = 1024


@pytest.fixture
def memory_url() -> Iterator[str]:
    name = f"sched-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    MemoryStorage.drop(name)


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll for a condition another thread brings about; fail loudly if it never does."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.005)


# --- batching ----------------------------------------------------------------------------------


def test_persists_of_four_writers_within_the_delay_share_one_request(s3: S3Env) -> None:
    # A delay far longer than four persist() calls; no hedges, so the request count is exact.
    options = s3.options.with_changes(persist_delay=0.5, hedging_enabled=False)
    with ChangelogService(s3.url, options) as storage:
        futures = {}
        for number in range(4):
            writer = storage.create_writer(f"log-{number}", directory="state")
            writer.append(number, f"change of {number}".encode())
            futures[writer.log_id] = writer.persist(0)
        handles = {log_id: future.result(10) for log_id, future in futures.items()}
        (path,) = {handle.paths[0] for handle in handles.values()}
        header, change_sets = read_file(storage.get(path), path)
    assert s3.proxy.count("PUT") == 1
    assert sorted(log.log_id for log in header.logs) == sorted(futures)
    assert sorted((cs.log_id, cs.entries) for cs in change_sets) == [
        (f"log-{n}", ((n, f"change of {n}".encode()),)) for n in range(4)]


def test_one_drain_writes_one_file_per_directory(memory_url: str) -> None:
    with ChangelogService(memory_url, ChangelogSettings(persist_delay=0.3)) as storage:
        futures = []
        for number in range(4):
            writer = storage.create_writer(f"log-{number}", directory=f"dir-{number % 2}")
            writer.append(0, b"x")
            futures.append(writer.persist(0))
        paths = sorted({future.result(10).paths[0] for future in futures})
        metrics = storage.metrics_snapshot()
    assert [path.split("/")[0] for path in paths] == ["dir-0", "dir-1"]
    assert (metrics["drains"], metrics["files"]) == (1, 2)
    assert metrics["logs_per_request"]["mean"] == 2


def test_each_writer_is_contiguous_and_in_sqn_order_in_its_file(memory_url: str) -> None:
    with ChangelogService(memory_url, ChangelogSettings(persist_delay=0.3)) as storage:
        one, two = storage.create_writer("one"), storage.create_writer("two")
        futures = []
        for round_ in range(3):
            for writer in (one, two):
                writer.append(0, f"{writer.log_id}-{round_}".encode())
                futures.append(writer.persist(writer.lowest_sqn))
        path = futures[0].result(10).paths[0]
        _, change_sets = read_file(storage.get(path), path)
    assert [(cs.log_id, cs.sqn) for cs in change_sets] == [
        ("one", 0), ("one", 1), ("one", 2), ("two", 0), ("two", 1), ("two", 2)]


def test_size_threshold_uploads_without_waiting_for_the_delay(memory_url: str) -> None:
    options = ChangelogSettings(persist_delay=3600, persist_size_threshold=KB)
    with ChangelogService(memory_url, options) as storage:
        writer = storage.create_writer("log")
        writer.append(0, b"x" * (2 * KB))
        # An hour-long delay: the upload can only finish in time if the threshold fired it.
        handle = writer.persist(0).result(timeout=10)
        assert storage.get(handle.paths[0])


def test_busy_uploads_make_later_persists_share_one_drain(s3: S3Env) -> None:
    options = s3.options.with_changes(persist_delay=0.001, max_concurrent_uploads=1,
                                      hedging_enabled=False)
    s3.proxy.add_rule(FaultRule("delay", method="PUT", delay=0.5, times=1))
    with ChangelogService(s3.url, options) as storage:
        writers = [storage.create_writer(f"log-{n}") for n in range(3)]
        writers[0].append(0, b"first")
        first = writers[0].persist(0)
        wait_until(lambda: s3.proxy.count("PUT") == 1)  # the only upload slot is now busy
        later = []
        for writer in writers[1:]:
            writer.append(0, b"later")
            later.append(writer.persist(0))
        first.result(10)
        assert later[0].result(10).paths == later[1].result(10).paths
    assert s3.proxy.count("PUT") == 2


# --- pre-emptive persist -----------------------------------------------------------------------


def test_writer_over_the_preemptive_threshold_uploads_on_its_own(memory_url: str) -> None:
    options = ChangelogSettings(persist_delay=0.001, preemptive_persist_threshold=KB)
    with ChangelogService(memory_url, options) as storage:
        writer = storage.create_writer("log")
        writer.append(0, b"a" * 600)
        writer.append(1, b"b" * 600)
        wait_until(lambda: storage.metrics_snapshot()["uploads"] == 1)
        handle = writer.persist(0).result(10)
        metrics = storage.metrics_snapshot()
    assert (metrics["uploads"], metrics["preemptive_persists"]) == (1, 1)
    assert (handle.from_sqn, handle.to_sqn) == (0, 1)


def test_writer_under_the_preemptive_threshold_waits_for_persist(memory_url: str) -> None:
    options = ChangelogSettings(persist_delay=0.001, preemptive_persist_threshold=KB)
    with ChangelogService(memory_url, options) as storage:
        writer = storage.create_writer("log")
        writer.append(0, b"a" * 600)
        writer.persist(0).result(10)
        writer.append(1, b"b" * 600)  # the persisted 600 bytes no longer count as pending
        assert storage.metrics_snapshot()["preemptive_persists"] == 0


# --- backpressure ------------------------------------------------------------------------------


def test_persist_blocks_while_over_the_in_flight_limit(s3: S3Env) -> None:
    options = s3.options.with_changes(persist_delay=0.001, max_in_flight_bytes=KB)
    s3.proxy.add_rule(FaultRule("delay", method="PUT", delay=1.0, times=1))
    with ChangelogService(s3.url, options) as storage:
        held, blocked = storage.create_writer("held"), storage.create_writer("blocked")
        held.append(0, b"h" * 800)
        first = held.persist(0)
        seen_on_return: list[int | None] = []

        def second_persist() -> None:
            blocked.append(0, b"b" * 500)
            future = blocked.persist(0)
            seen_on_return.append(s3.proxy.records("PUT")[0].status)
            future.result(10)

        thread = threading.Thread(target=second_persist)
        thread.start()
        wait_until(lambda: storage.metrics_snapshot()["blocked_callers"] == 1)
        assert not first.done() and not seen_on_return
        first.result(10)
        thread.join(10)
        assert seen_on_return == [200]  # released only after the held upload was answered
        assert storage.metrics_snapshot()["blocked_seconds"] > 0


def test_append_blocks_while_an_oversized_change_set_is_in_flight(s3: S3Env) -> None:
    options = s3.options.with_changes(persist_delay=0.001, max_in_flight_bytes=KB)
    s3.proxy.add_rule(FaultRule("delay", method="PUT", delay=1.0, times=1))
    with ChangelogService(s3.url, options) as storage:
        big, other = storage.create_writer("big"), storage.create_writer("other")
        big.append(0, b"x" * (3 * KB))  # larger than the whole limit: admitted alone
        first = big.persist(0)
        wait_until(lambda: s3.proxy.count("PUT") == 1)
        returned = threading.Event()

        def small_append() -> None:
            other.append(0, b"y")
            returned.set()

        thread = threading.Thread(target=small_append)
        thread.start()
        wait_until(lambda: storage.metrics_snapshot()["blocked_callers"] == 1)
        assert not returned.is_set()
        assert len(storage.get(first.result(10).paths[0])) > 3 * KB
        thread.join(10)
        assert returned.is_set()


def test_in_flight_bytes_return_to_zero_after_uploads(memory_url: str) -> None:
    with ChangelogService(memory_url, ChangelogSettings(persist_delay=0.001)) as storage:
        writer = storage.create_writer("log")
        writer.append(0, b"x" * KB)
        writer.persist(0).result(10)
        metrics = storage.metrics_snapshot()
    assert (metrics["in_flight_bytes"], metrics["queue_length"]) == (0, 0)
