"""The dstl-progress source's read: which commit entry a batch's progress branch shows, and
what reading it costs in the commit log."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyspark_dstl.backend.lineage.commit_entry import CommitEntry
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.spark.readers.progress_source import (
    MetricsPartition,
    MetricsReader,
    newest_committed,
    running_batch,
)
from tests.support.backend import BackendEnv, entry, env  # noqa: F401 - fixture


def test_batch_n_shows_the_entry_of_batch_n_minus_one(env: BackendEnv) -> None:  # noqa: F811
    writer = env.commit_log()
    for batch_id in range(3):
        writer.write(batch_id, entry(batch_id))
    found = newest_committed(CommitLog(env.storage), 2)
    assert found is not None and found[0] == 1 and found[1].batch_id == 1


def test_a_batch_whose_predecessor_has_no_entry_shows_the_newest_entry(
        env: BackendEnv) -> None:  # noqa: F811
    writer = env.commit_log()
    for batch_id in (0, 4):
        writer.write(batch_id, entry(batch_id))
    found = newest_committed(CommitLog(env.storage), 8)
    assert found is not None and found[0] == 4


def test_outside_a_streaming_batch_the_newest_entry_is_shown(
        env: BackendEnv) -> None:  # noqa: F811
    writer = env.commit_log()
    for batch_id in range(3):
        writer.write(batch_id, entry(batch_id))
    found = newest_committed(CommitLog(env.storage), None)
    assert found is not None and found[0] == 2


def test_the_first_batch_of_an_empty_log_shows_nothing(env: BackendEnv) -> None:  # noqa: F811
    assert newest_committed(CommitLog(env.storage), 0) is None


def test_the_driver_is_in_no_streaming_batch() -> None:
    assert running_batch() is None


def read_rows(url: str) -> list[tuple[object, ...]]:
    reader = MetricsReader({"path": url, "operatorName": "agg"})
    return list(reader.read(MetricsPartition()))


def test_the_read_yields_the_newest_batch_and_its_metrics_in_one_row(
        env: BackendEnv) -> None:  # noqa: F811
    log = env.commit_log()
    for batch_id in range(2):
        log.write(batch_id, CommitEntry(batch_id, entry(batch_id).operators,
                                        extra={"metrics": {"input_rows": 10 + batch_id}}))
    assert read_rows(env.url) == [(1, {"input_rows": 11.0})]


def test_the_read_yields_one_empty_row_before_the_first_commit(tmp_path: Path) -> None:
    """The branch is cross-joined to the query's input: without its one row, no input row
    would reach the stateful stage."""
    assert read_rows(tmp_path.as_uri()) == [(None, None)]


def test_the_read_yields_one_empty_row_and_a_warning_when_the_storage_fails(
        caplog: pytest.LogCaptureFixture) -> None:
    assert read_rows("nosuchscheme://bucket/ckpt") == [(None, None)]
    assert "cannot read the commit log" in caplog.text
