"""Uploads through the fault proxy: which failures are retried, create-only, hedging."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl.changelog import (
    ChangelogService,
    ChangelogSettings,
    ObjectExistsError,
    PermanentStorageError,
    UploadFailedError,
)
from pyspark_dstl.changelog.upload.hedging import HedgeBudget, LatencyTracker
from tests.support import FaultRule, S3Env

# Request counts at the proxy are exact only without hedges; hedging has its own tests below.
FAST_RETRIES = {"backoff_initial": 0.01, "backoff_max": 0.05, "persist_delay": 0.001,
                "hedging_enabled": False}


@pytest.fixture
def storage(s3: S3Env) -> Iterator[ChangelogService]:
    with ChangelogService(s3.url, s3.options.with_changes(**FAST_RETRIES)) as opened:
        yield opened


# --- retries -----------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", [
    FaultRule("status", method="PUT", status=503, times=2),
    FaultRule("status", method="PUT", status=500, times=2),
    FaultRule("reset", method="PUT", times=2),
    FaultRule("lose_response", method="PUT", times=2),
], ids=["503", "500", "reset", "lose_response"])
def test_transient_failures_are_retried_until_the_upload_lands(
        s3: S3Env, storage: ChangelogService, rule: FaultRule) -> None:
    s3.proxy.add_rule(rule)
    writer = storage.create_writer("log")
    writer.append(0, b"payload")
    handle = writer.persist(0).result(10)
    assert s3.proxy.count("PUT") == 3
    assert s3.direct_keys() == [handle.paths[0]]
    assert [cs.entries for cs in storage.reader().read(handle)] == [((0, b"payload"),)]
    assert storage.metrics_snapshot()["retries"] == 2


def test_attempt_that_times_out_is_retried(s3: S3Env) -> None:
    # the held attempt times out; the retry must land inside the same timeout on a machine
    # busy with the other test process (a 0.3 s timeout once left a retry too little)
    options = s3.options.with_changes(attempt_timeout=2.0, **FAST_RETRIES)
    s3.proxy.add_rule(FaultRule("timeout", method="PUT", delay=10.0, times=1))
    with ChangelogService(s3.url, options) as storage:
        etag = storage.put("objects/a", b"data")
        metrics = storage.metrics_snapshot()
    assert s3.direct_get("objects/a") == b"data" and len(etag) == 32
    assert (s3.proxy.count("PUT"), metrics["retries"]) == (2, 1)


def test_upload_gives_up_after_max_attempts(s3: S3Env, storage: ChangelogService) -> None:
    s3.proxy.add_rule(FaultRule("status", method="PUT", status=503))
    with pytest.raises(UploadFailedError, match="'objects/a' failed after 3 attempt") as caught:
        storage.put("objects/a", b"data")
    assert caught.value.path == "objects/a"
    assert s3.proxy.count("PUT") == 3
    assert storage.metrics_snapshot()["upload_failures"] == 1


def test_forbidden_upload_is_not_retried_and_names_the_path(
        s3: S3Env, storage: ChangelogService) -> None:
    s3.proxy.add_rule(FaultRule("status", method="PUT", status=403))
    writer = storage.create_writer("log", directory="state")
    writer.append(0, b"payload")
    with pytest.raises(UploadFailedError) as caught:
        writer.persist(0).result(10)
    (put,) = s3.proxy.records("PUT")
    assert caught.value.path is not None and put.path.endswith(caught.value.path)
    assert repr(caught.value.path) in str(caught.value)
    assert isinstance(caught.value.__cause__, PermanentStorageError)


def test_persist_after_a_failed_upload_includes_its_change_sets(
        s3: S3Env, storage: ChangelogService) -> None:
    s3.proxy.add_rule(FaultRule("status", method="PUT", status=403, times=1))
    writer = storage.create_writer("log")
    writer.append(0, b"a")
    failed = writer.persist(0)
    with pytest.raises(UploadFailedError):
        failed.result(10)
    writer.append(0, b"b")
    handle = writer.persist(0).result(10)
    assert [cs.entries for cs in storage.reader().read(handle)] == [((0, b"a"),), ((0, b"b"),)]


def test_every_persist_waiting_on_a_failed_file_fails(s3: S3Env) -> None:
    options = s3.options.with_changes(persist_delay=0.3, hedging_enabled=False)
    s3.proxy.add_rule(FaultRule("status", method="PUT", status=403, times=1))
    with ChangelogService(s3.url, options) as storage:
        writer = storage.create_writer("log")
        writer.append(0, b"a")
        first = writer.persist(0)
        writer.append(0, b"b")
        second = writer.persist(0)
        errors = [future.exception(10) for future in (first, second)]
    assert all(isinstance(error, UploadFailedError) for error in errors)
    assert s3.proxy.count("PUT") == 1


# --- create-only -------------------------------------------------------------------------------


def test_existing_object_with_other_content_is_never_overwritten_on_s3(
        s3: S3Env, storage: ChangelogService) -> None:
    storage.put("objects/a", b"one")
    with pytest.raises(UploadFailedError, match="'objects/a'") as caught:
        storage.put("objects/a", b"two")
    assert isinstance(caught.value.__cause__, ObjectExistsError)
    assert s3.direct_get("objects/a") == b"one"


def test_existing_object_with_other_content_is_never_overwritten_on_files(
        tmp_path: Path) -> None:
    with ChangelogService((tmp_path / "root").as_uri(), ChangelogSettings()) as storage:
        storage.put("objects/a", b"one")
        with pytest.raises(UploadFailedError, match="'objects/a'"):
            storage.put("objects/a", b"two")
    assert (tmp_path / "root" / "objects" / "a").read_bytes() == b"one"


def test_lost_answer_then_exists_with_other_content_is_a_conflict(
        s3: S3Env, storage: ChangelogService) -> None:
    s3.direct_put("objects/a", b"someone else")
    s3.proxy.add_rule(FaultRule("reset", method="PUT", times=1))
    with pytest.raises(UploadFailedError, match="exists with other content"):
        storage.put("objects/a", b"ours")
    assert s3.direct_get("objects/a") == b"someone else"


# --- hedging -----------------------------------------------------------------------------------


def hedging_options(s3: S3Env, **changes: float) -> ChangelogSettings:
    settings: dict[str, float] = {
        "persist_delay": 0.001, "hedge_min_samples": 5, "hedge_quantile": 0.9,
        "hedge_min_delay": 0.05, "hedge_max_delay": 0.5,
        "hedge_budget": 0.5,  # the warm-up is short: 5 uploads must pay for one hedge
        "hedge_max_hedges": 1,  # one twin, so a twin slowed by a busy machine is not raced
        **changes,
    }
    return s3.options.with_changes(**settings)


def warm_up(storage: ChangelogService, uploads: int = 6) -> None:
    writer = storage.create_writer("warm-up")
    for number in range(uploads):
        writer.append(0, b"w")
        writer.persist(number).result(10)
    writer.close()


def hedge_counts(storage: ChangelogService) -> tuple[int, int]:
    metrics = storage.metrics_snapshot()
    return metrics["hedges_started"], metrics["hedges_won"]


def test_slow_upload_is_hedged_and_the_hedge_wins(s3: S3Env) -> None:
    with ChangelogService(s3.url, hedging_options(s3)) as storage:
        warm_up(storage)
        before = hedge_counts(storage)
        s3.proxy.add_rule(FaultRule("hold", method="PUT", delay=60.0, times=1))
        writer = storage.create_writer("log")
        writer.append(0, b"payload")
        started = time.monotonic()
        handle = writer.persist(0).result(10)
        elapsed = time.monotonic() - started
        # The original is held until released; the hedge starts after at most 0.5 s (the cap)
        # and lands on its own.
        assert elapsed < 4.0
        path = handle.paths[0]
        stored = s3.direct_get(path)
        s3.proxy.release_held()
        assert s3.proxy.wait_idle(timeout=10)  # the held original has now landed or gone
        after = hedge_counts(storage)
        assert s3.direct_get(path) == stored
        assert [cs.entries for cs in storage.reader().read(handle)] == [((0, b"payload"),)]
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
    assert s3.direct_keys().count(path) == 1


def test_a_second_twin_starts_when_the_first_is_slow_too(s3: S3Env) -> None:
    with ChangelogService(s3.url, hedging_options(s3, hedge_max_hedges=2)) as storage:
        warm_up(storage)
        before = hedge_counts(storage)
        s3.proxy.add_rule(FaultRule("hold", method="PUT", delay=60.0, times=2))
        writer = storage.create_writer("log")
        writer.append(0, b"payload")
        started = time.monotonic()
        handle = writer.persist(0).result(10)
        elapsed = time.monotonic() - started
        # Original and first twin are held until released; the second twin starts within
        # 2 x 0.5 s.
        assert elapsed < 5.0
        assert [cs.entries for cs in storage.reader().read(handle)] == [((0, b"payload"),)]
        s3.proxy.release_held()
        assert s3.proxy.wait_idle(timeout=10)
        after = hedge_counts(storage)
    assert (after[0] - before[0], after[1] - before[1]) == (2, 1)
    assert s3.direct_keys().count(handle.paths[0]) == 1


def test_hedges_stop_at_the_configured_number(s3: S3Env) -> None:
    with ChangelogService(s3.url, hedging_options(s3, hedge_max_hedges=2)) as storage:
        warm_up(storage)
        before = hedge_counts(storage)
        s3.proxy.add_rule(FaultRule("delay", method="PUT", delay=2.0, times=3))
        writer = storage.create_writer("log")
        writer.append(0, b"payload")
        writer.persist(0).result(10)
        after = hedge_counts(storage)
    assert after[0] - before[0] == 2  # three requests in all, each held: no third twin


def test_hedge_that_finds_the_original_applied_succeeds(s3: S3Env) -> None:
    with ChangelogService(s3.url, hedging_options(s3)) as storage:
        warm_up(storage)
        before = hedge_counts(storage)
        s3.proxy.add_rule(FaultRule("slow_response", method="PUT", delay=2.0, times=1))
        writer = storage.create_writer("log")
        writer.append(0, b"payload")
        handle = writer.persist(0).result(10)
        path = handle.paths[0]
        hedge = s3.proxy.records("PUT", path)[-1]
        after = hedge_counts(storage)
        assert [cs.entries for cs in storage.reader().read(handle)] == [((0, b"payload"),)]
    assert hedge.status == 412  # the original was applied; its answer was what was slow
    assert after[1] - before[1] == 1


def test_no_hedge_starts_without_budget(s3: S3Env) -> None:
    with ChangelogService(s3.url, hedging_options(s3, hedge_budget=0.0)) as storage:
        warm_up(storage)
        s3.proxy.add_rule(FaultRule("delay", method="PUT", delay=0.5, times=1))
        writer = storage.create_writer("log")
        writer.append(0, b"payload")
        writer.persist(0).result(10)
        metrics = storage.metrics_snapshot()
    assert metrics["hedges_started"] == 0
    assert s3.proxy.count("PUT") == 7


def test_hedge_delay_is_the_cap_until_enough_samples() -> None:
    tracker = LatencyTracker(ChangelogSettings(hedge_min_samples=3, hedge_max_delay=1.5))
    tracker.record(0.01)
    tracker.record(0.01)
    assert tracker.hedge_delay() == 1.5


def test_hedge_delay_follows_the_quantile_within_its_bounds() -> None:
    options = ChangelogSettings(hedge_min_samples=1, hedge_quantile=0.5, hedge_min_delay=0.1,
                               hedge_max_delay=1.0)
    tracker = LatencyTracker(options)
    for seconds in (0.2, 0.3, 0.4):
        tracker.record(seconds)
    assert tracker.hedge_delay() == 0.3
    for seconds in (5.0, 5.0, 5.0, 5.0):
        tracker.record(seconds)
    assert tracker.hedge_delay() == 1.0


def test_hedge_budget_allows_its_ratio_of_uploads() -> None:
    budget = HedgeBudget(0.25)
    granted = []
    for _ in range(8):
        budget.upload_started()
        granted.append(budget.try_spend())
    assert sum(granted) == 2
