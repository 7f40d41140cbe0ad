"""Folding task statistics into one batch's metrics, and the per-process upload deltas."""

from __future__ import annotations

import pytest

from pyspark_dstl.backend.ops.batch_metrics import (
    LATENCY_LABELS,
    UploadProgress,
    bucket_quantile,
    task_measures,
    upload_measures,
)
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.spark.stage.upload_stats import upload_delta


def task(partition: int, **values: object) -> dict[str, object]:
    return {"partition": partition, "attempt": 0, "materialized_version": None, **values}


def test_counts_are_summed_and_durations_keep_the_slowest_task() -> None:
    folded = task_measures([task(0, input_rows=3, commit_seconds=0.2),
                            task(1, input_rows=4, commit_seconds=0.5)])
    assert folded["input_rows"] == 7
    assert folded["commit_seconds"] == 0.5
    assert "partition" not in folded and "attempt" not in folded


def test_a_counter_tasks_start_reporting_appears_without_a_change() -> None:
    folded = task_measures([task(0, timers_fired=2, late_rows=1), task(1, timers_fired=5)])
    assert (folded["timers_fired"], folded["late_rows"]) == (7, 1)


def test_store_values_are_renamed_and_load_kinds_counted() -> None:
    folded = task_measures([
        task(0, store={"rows_updated": 3, "rows_removed": 1, "estimated_keys": 10,
                       "load_kind": "restore", "commits": 99}),
        task(1, store={"rows_updated": 2, "rows_removed": 0, "estimated_keys": 5,
                       "load_kind": "reuse"}),
    ])
    assert (folded["rows_updated"], folded["rows_removed"]) == (5, 1)
    assert folded["state_rows_estimate"] == 15
    assert (folded["loads_restore"], folded["loads_reuse"]) == (1, 1)
    assert "commits" not in folded  # a store instance's life-long counter, not this batch's


def buckets(**counts: int) -> dict[str, int]:
    return {label: counts.get(label.replace(".", "_"), 0) for label in LATENCY_LABELS}


def test_latency_quantiles_are_the_upper_bound_of_their_bucket() -> None:
    observed = buckets(**{"0_01": 98, "1": 2})  # 98 uploads under 10 ms, 2 near a second
    assert bucket_quantile(observed, 0.50) == 0.01
    assert bucket_quantile(observed, 0.99) == 1.0
    assert bucket_quantile(buckets(), 0.5) == 0.0
    assert bucket_quantile(buckets(**{"+Inf": 1}), 0.5) == 30.0


def test_upload_deltas_of_tasks_add_up_with_the_extra_request_ratio() -> None:
    first = {"requests": 5, "uploads": 4, "retries": 1, "hedges_started": 0,
             "bytes_uploaded": 100, "blocked_seconds": 0.5,
             "latency_buckets": buckets(**{"0_01": 4})}
    second = {"requests": 3, "uploads": 2, "hedges_started": 1, "hedges_won": 1,
              "bytes_uploaded": 50, "latency_buckets": buckets(**{"0_5": 2})}
    measures = upload_measures([task(0, upload=first), task(1, upload=second)])
    progress = UploadProgress.from_metrics(measures)
    assert (progress.requests, progress.uploads, progress.retries) == (8, 6, 1)
    assert (progress.hedges_started, progress.hedges_won, progress.bytes) == (1, 1, 150)
    assert progress.extra_request_ratio == pytest.approx(2 / 6)
    assert (progress.latency_p50_seconds, progress.latency_p99_seconds) == (0.01, 0.5)
    assert progress.blocked_seconds == 0.5


def test_each_report_of_a_storage_counts_what_happened_since_the_last(tmp_path: object) -> None:
    with ChangelogService(f"memory://deltas-{id(tmp_path)}") as storage:
        writer = storage.create_writer("log")
        writer.append(0, b"a")
        writer.persist(0).result(10)
        first = upload_delta(storage)
        assert first["uploads"] == 1 and sum(first["latency_buckets"].values()) == 1
        assert upload_delta(storage)["uploads"] == 0  # nothing new since
        writer.append(1, b"b")
        writer.persist(1).result(10)
        again = upload_delta(storage)
        writer.close()
    assert again["uploads"] == 1 and again["bytes_uploaded"] > 0


def test_timer_and_event_instants_keep_the_earliest_and_latest_not_a_sum() -> None:
    from pyspark_dstl.backend.ops.batch_metrics import task_measures

    folded = task_measures([{"next_timer_ms": 500, "max_event_time_ms": 10, "timers_fired": 2},
                            {"next_timer_ms": 300, "max_event_time_ms": 40, "timers_fired": 1}])
    assert (folded["next_timer_ms"], folded["max_event_time_ms"], folded["timers_fired"]) == (
        300, 40, 3)
