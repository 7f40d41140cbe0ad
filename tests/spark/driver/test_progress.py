"""Per-batch state metrics where users look: Spark's progress reports, BatchProgress (with the
uploads), the commit entry and the log lines, from real queries in local PySpark (the log
lines without Spark: tests/spark/driver/test_progress_lines.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.spark import StatefulStream, observed_state_metrics, stateful
from pyspark_dstl.spark.driver.progress import (
    OBSERVATION,
    PROGRESS_JSON_LOGGER,
    PROGRESS_LOGGER,
    progress_line,
)
from tests.support.fault_proxy import FaultRule
from tests.support.spark import (
    COUNT_SCHEMA,
    CountProcessor,
    file_stream,
    make_batches,
    write_batches,
)

pytestmark = pytest.mark.spark


def run_query(spark: Any, root: Path, batches: int = 3, **process_args: Any) -> tuple[
        StatefulStream, Any]:
    write_batches(root / "in", make_batches(batches, rows=60, keys=12, seed=21))
    process_args.setdefault("checkpoint_location", str(root / "ckpt"))
    stream = (stateful(file_stream(spark, root / "in")).group_by("user")
              .process(CountProcessor(), COUNT_SCHEMA, partitions=2, **process_args))
    query = stream.start(trigger={"availableNow": True})
    query.awaitTermination()
    assert query.exception() is None
    return stream, query


def test_spark_progress_observes_the_state_metrics_of_the_batch_before(
        spark: Any, tmp_path: Path) -> None:
    stream, query = run_query(spark, tmp_path)
    reports = {p["batchId"]: p for p in query.recentProgress if p["numInputRows"] > 0}
    assert sorted(reports) == [0, 1, 2]
    assert observed_state_metrics(reports[0]) == {"batch_id": None, "metrics": {}}
    for batch_id in (1, 2):
        row = reports[batch_id]["observedMetrics"][OBSERVATION]
        assert row["batch_id"] == batch_id - 1
        assert observed_state_metrics(reports[batch_id]) == {
            "batch_id": batch_id - 1,
            "metrics": pytest.approx(stream.progress[batch_id - 1].metrics)}


def test_observed_metrics_are_switched_off_by_one_setting(spark: Any, tmp_path: Path) -> None:
    stream, query = run_query(spark, tmp_path, batches=2,
                              settings={"query.observedMetrics": "false"})
    reports = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(reports) == 2
    assert all(OBSERVATION not in (p["observedMetrics"] or {}) for p in reports)
    assert len(stream.progress) == 2 and stream.progress[1].metrics["input_rows"] == 60


def test_the_state_metrics_in_spark_progress_cost_no_spark_job_of_their_own(
        spark: Any, tmp_path: Path) -> None:
    tracker = spark.sparkContext.statusTracker()
    jobs = {}
    for observed in ("true", "false"):
        _, query = run_query(spark, tmp_path / observed, batches=3,
                             settings={"query.observedMetrics": observed})
        jobs[observed] = len(tracker.getJobIdsForGroup(str(query.runId)))
    assert jobs["false"] > 0
    assert jobs["true"] == jobs["false"]


def test_state_metrics_count_rows_keys_and_loads(spark: Any, tmp_path: Path) -> None:
    stream, _ = run_query(spark, tmp_path)
    first, second = stream.progress[0].metrics, stream.progress[1].metrics
    assert first["input_rows"] == 60 and first["partitions"] == 2
    assert first["rows_updated"] == first["keys"]  # one count per key of the batch
    assert first["rows_removed"] == 0
    assert first["loads_empty"] == 2 and second.get("loads_empty", 0) == 0
    assert first["changelog_bytes"] == stream.progress[0].changelog_bytes
    assert first["upload_requests"] >= first["uploads"] >= 2  # a changelog file per store


def test_a_tasks_time_splits_into_input_load_process_and_commit(spark: Any,
                                                                  tmp_path: Path) -> None:
    stream, _ = run_query(spark, tmp_path, batches=1)
    metrics = stream.progress[0].metrics
    parts = ("input_seconds", "load_seconds", "process_seconds", "commit_seconds")
    assert all(metrics[name] > 0 for name in parts)
    # each is the slowest task's, so their sum can exceed one task but not all tasks together
    assert max(metrics[name] for name in parts) <= metrics["task_seconds"]
    assert sum(metrics[name] for name in parts) <= 2 * metrics["task_seconds"]


def test_a_commit_splits_into_its_final_flush_and_the_wait_for_the_upload(
        spark: Any, tmp_path: Path) -> None:
    stream, _ = run_query(spark, tmp_path, batches=1)
    metrics = stream.progress[0].metrics
    assert metrics["commit_flush_seconds"] > 0 and metrics["commit_upload_wait_seconds"] > 0
    assert max(metrics["commit_flush_seconds"],
               metrics["commit_upload_wait_seconds"]) <= metrics["commit_seconds"]


def test_commit_entries_record_the_batch_metrics(spark: Any, tmp_path: Path) -> None:
    stream, _ = run_query(spark, tmp_path, batches=2)
    with ChangelogService((tmp_path / "ckpt").as_uri()) as storage:
        entries = [CommitLog(storage).read(b) for b in (0, 1)]
    for entry, progress in zip(entries, stream.progress, strict=True):
        assert entry.extra["metrics"] == pytest.approx(progress.metrics)
        assert entry.extra["stage_seconds"] > 0


def test_batch_progress_counts_upload_retries_on_the_s3_api(spark: Any, s3: Any,
                                                             tmp_path: Path) -> None:
    settings = {
        **s3.query_settings(), "changelog.hedging.enabled": "false",
        "query.engineCheckpointLocation": str(tmp_path / "engine"),
    }
    s3.proxy.add_rule(FaultRule("status", method="PUT", path_contains="/state/", status=503,
                                times=2))
    stream, _ = run_query(spark, tmp_path, batches=2, checkpoint_location=s3.url, settings=settings)
    uploads = [p.upload for p in stream.progress]
    assert sum(u.retries for u in uploads) == 2
    assert sum(u.requests for u in uploads) == sum(u.uploads for u in uploads) + 2
    assert sum(u.upload_failures for u in uploads) == 0
    assert all(u.bytes > 0 and u.latency_p99_seconds >= u.latency_p50_seconds > 0
               for u in uploads)
    assert max(u.extra_request_ratio for u in uploads) > 0


def test_the_progress_branch_reads_the_batch_before_by_its_own_names_on_s3(
        spark: Any, s3: Any, tmp_path: Path) -> None:
    settings = {
        **s3.query_settings(),
        "query.engineCheckpointLocation": str(tmp_path / "engine"),
    }
    _, query = run_query(spark, tmp_path, batches=3, checkpoint_location=s3.url, settings=settings)
    reports = {p["batchId"]: p for p in query.recentProgress if p["numInputRows"] > 0}
    assert [observed_state_metrics(reports[b])["batch_id"] for b in (1, 2)] == [0, 1]
    listed = [r.query for r in s3.proxy.records("GET", "list-type")]
    for batch_id in (0, 1):
        assert sum(f"prefix={s3.prefix}/commits/{batch_id}.&" in q + "&" for q in listed) == 1


def test_every_batch_logs_one_short_line_and_its_metrics_as_json_when_logging_asks(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER), \
            caplog.at_level(logging.DEBUG, logger=PROGRESS_JSON_LOGGER):
        stream, _ = run_query(spark, tmp_path, batches=2)
    short = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER]
    assert short == [progress_line(p, "stateful") for p in stream.progress]
    records = [json.loads(r.getMessage()) for r in caplog.records
               if r.name == PROGRESS_JSON_LOGGER]
    assert [record["batch_id"] for record in records] == [0, 1]
    assert records[1]["event"] == "dstl.batch" and records[1]["operator"] == "stateful"
    assert records[1]["metrics"] == pytest.approx(stream.progress[1].metrics)


def test_a_query_logs_nothing_unless_asked(spark: Any, tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    run_query(spark, tmp_path, batches=1)
    assert [r for r in caplog.records if r.name.startswith(PROGRESS_LOGGER)] == []
