"""The dstl-progress source's read: which commit entry a batch's progress branch shows, and
what reading it costs in the commit log."""

from __future__ import annotations

from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.spark.readers.progress_source import newest_committed, running_batch
from tests.backend.test_commit_log import entry
from tests.support.backend import BackendEnv, env  # noqa: F401 - fixture


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
