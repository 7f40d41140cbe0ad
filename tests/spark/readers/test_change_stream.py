"""The change feed as a stream (`readStream.format("dstl-changes")`): every committed batch's
changes once, in batch order, resumable from the consumer's own checkpoint, never a batch the
producer may still run again, and holding the producer's cleanup back only within its bound."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.ops.feed_holds import feed_positions
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.spark.pyspark_versions import python_sources_run_available_now
from pyspark_dstl.spark.readers.change_feed import ChangeFeedError
from pyspark_dstl.spark.readers.change_stream import ChangeStreamReader
from tests.support.change_feed_jobs import (
    FEED_NAME,
    everything,
    item_frames,
    mirror_of,
    run_consumer,
    run_producer,
    state_of,
)
from tests.support.compat_runs import write_inputs
from tests.support.state_data import plain
from tests.support.tws_compare import session_conf

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

AVAILABLE_NOW_WRAPPER = "spark.sql.streaming.triggerAvailableNowWrapper.enabled"


def change_feed(spark: Any, location: Path, start: int = 0) -> list[Any]:
    """The batch change feed of the same variable, sorted."""
    df = (spark.read.format("dstl-statestore").option("stateVarName", "items")
          .option("readChangeFeed", "true").option("changeStartBatchId", start)
          .load(str(location)))
    return sorted((plain(row) for row in df.collect()), key=json.dumps)


@pytest.fixture
def frames() -> list[Any]:
    return item_frames(6, rows=40, users=7, seed=32)


def test_every_committed_batch_arrives_once_in_batch_order(
        spark: Any, tmp_path: Path, frames: list[Any]) -> None:
    write_inputs(tmp_path / "in", frames)
    run_producer(spark, tmp_path / "in", tmp_path / "ckpt")
    batches: dict[int, list[Any]] = {}
    run_consumer(spark, tmp_path / "ckpt", tmp_path / "feed", batches)
    assert everything(batches) == change_feed(spark, tmp_path / "ckpt")
    assert {row["batch_id"] for row in everything(batches)} == set(range(len(frames)))


def test_a_restarted_feed_resumes_where_its_checkpoint_stopped(
        spark: Any, tmp_path: Path, frames: list[Any]) -> None:
    write_inputs(tmp_path / "in", frames[:3])
    run_producer(spark, tmp_path / "in", tmp_path / "ckpt")
    first: dict[int, list[Any]] = {}
    run_consumer(spark, tmp_path / "ckpt", tmp_path / "feed", first)
    write_inputs(tmp_path / "in", frames[3:], start=3)
    run_producer(spark, tmp_path / "in", tmp_path / "ckpt")
    second: dict[int, list[Any]] = {}
    run_consumer(spark, tmp_path / "ckpt", tmp_path / "feed", second)
    # consumer batches follow the producer's: the restarted feed goes on after batch 2
    assert {row["batch_id"] for row in everything(first)} == {0, 1, 2}
    assert {row["batch_id"] for row in everything(second)} == {3, 4, 5}
    assert everything(first) + everything(second) == change_feed(spark, tmp_path / "ckpt")


@pytest.mark.version
def test_an_available_now_run_after_an_unfinished_batch_reads_up_to_the_newest_batch(
        spark: Any, tmp_path: Path, frames: list[Any]) -> None:
    # before 4.2 Spark runs a Python source under availableNow as one batch unless its wrapper
    # setting is on (docs/state-data.md says so); 4.2+ asks the source itself
    wrapper = {} if python_sources_run_available_now(spark) else {AVAILABLE_NOW_WRAPPER: "true"}
    with session_conf(spark, wrapper):
        read_on_after_an_unfinished_batch(spark, tmp_path, frames)


def read_on_after_an_unfinished_batch(spark: Any, tmp_path: Path, frames: list[Any]) -> None:
    write_inputs(tmp_path / "in", frames[:2])
    run_producer(spark, tmp_path / "in", tmp_path / "ckpt")
    batches: dict[int, list[Any]] = {}
    run_consumer(spark, tmp_path / "ckpt", tmp_path / "feed", batches)
    write_inputs(tmp_path / "in", frames[2:4], start=2)
    run_producer(spark, tmp_path / "in", tmp_path / "ckpt")
    with pytest.raises(Exception, match="the sink fails consumer batch 1"):
        run_consumer(spark, tmp_path / "ckpt", tmp_path / "feed", batches, fail_at=1)
    write_inputs(tmp_path / "in", frames[4:], start=4)
    run_producer(spark, tmp_path / "in", tmp_path / "ckpt")
    # Spark runs the unfinished consumer batch (producer batches 2-3) again, then goes on
    run_consumer(spark, tmp_path / "ckpt", tmp_path / "feed", batches)
    assert sorted(batches) == [0, 1, 2]
    assert {row["batch_id"] for row in batches[2]} == {4, 5}
    assert everything(batches) == change_feed(spark, tmp_path / "ckpt")


def test_the_mirror_of_the_feed_equals_the_state_readers_view(
        spark: Any, tmp_path: Path, frames: list[Any]) -> None:
    write_inputs(tmp_path / "in", frames)
    run_producer(spark, tmp_path / "in", tmp_path / "ckpt")
    batches: dict[int, list[Any]] = {}
    run_consumer(spark, tmp_path / "ckpt", tmp_path / "feed", batches)
    mirror = mirror_of(everything(batches))
    assert mirror and mirror == state_of(spark, str(tmp_path / "ckpt"))


def test_the_newest_batch_waits_until_the_producers_engine_committed_it(
        spark: Any, tmp_path: Path, frames: list[Any]) -> None:
    write_inputs(tmp_path / "in", frames[:3])
    run_producer(spark, tmp_path / "in", tmp_path / "ckpt")
    options = {"path": str(tmp_path / "ckpt"), "stateVarName": "items", "feedName": "t"}
    assert ChangeStreamReader(options).latestOffset() == {"batch": 3}
    # as if the producer died after its commit entry of batch 2 and before Spark's commit:
    # a restart runs batch 2 again, so the feed must not have read it yet
    (tmp_path / "ckpt" / "engine" / "commits" / "2").unlink()
    reader = ChangeStreamReader(options)
    assert reader.latestOffset() == {"batch": 2}
    reader.stop()


def test_a_feed_needs_a_name_of_its_own(spark: Any, tmp_path: Path, frames: list[Any]) -> None:
    write_inputs(tmp_path / "in", frames[:1])
    run_producer(spark, tmp_path / "in", tmp_path / "ckpt")
    with pytest.raises(ChangeFeedError, match="option feedName: give this feed a name"):
        ChangeStreamReader({"path": str(tmp_path / "ckpt"), "stateVarName": "items"})


def committed(location: Path) -> list[int]:
    with ChangelogService(location.as_uri()) as storage:
        return CommitLog(storage).batch_ids()


def position(location: Path) -> int:
    """The feed's recorded position: where its last consumer batch that Spark committed to
    the source ended (Spark does that when it plans the next batch, so the last batch of an
    availableNow run is committed by the next run)."""
    with ChangelogService(location.as_uri()) as storage:
        return feed_positions(storage)[FEED_NAME]


RETAIN = {"spark.dstl.stateStore.minBatchesToRetain": "2",
          "spark.dstl.query.cleanupInterval": "1"}


def test_a_feed_behind_keeps_the_producers_cleanup_from_its_batches(
        spark: Any, tmp_path: Path, frames: list[Any]) -> None:
    write_inputs(tmp_path / "in", frames[:1])
    run_producer(spark, tmp_path / "in", tmp_path / "ckpt", RETAIN)
    batches: dict[int, list[Any]] = {}
    run_consumer(spark, tmp_path / "ckpt", tmp_path / "feed", batches)
    held = position(tmp_path / "ckpt")
    write_inputs(tmp_path / "in", frames[1:], start=1)
    run_producer(spark, tmp_path / "in", tmp_path / "ckpt",
                 {**RETAIN, "spark.dstl.stateStore.maxBatchesHeldForFeeds": "10"})
    assert held <= 1 and committed(tmp_path / "ckpt") == list(range(held, 6))  # not [4, 5]
    run_consumer(spark, tmp_path / "ckpt", tmp_path / "feed", batches)
    assert position(tmp_path / "ckpt") > held
    assert mirror_of(everything(batches)) == state_of(spark, str(tmp_path / "ckpt"))


def test_a_feed_behind_the_bound_fails_by_name_and_cleanup_goes_on(
        spark: Any, tmp_path: Path, frames: list[Any]) -> None:
    write_inputs(tmp_path / "in", frames[:1])
    run_producer(spark, tmp_path / "in", tmp_path / "ckpt", RETAIN)
    batches: dict[int, list[Any]] = {}
    run_consumer(spark, tmp_path / "ckpt", tmp_path / "feed", batches)
    write_inputs(tmp_path / "in", frames[1:], start=1)
    run_producer(spark, tmp_path / "in", tmp_path / "ckpt",
                 {**RETAIN, "spark.dstl.stateStore.maxBatchesHeldForFeeds": "1"})
    assert committed(tmp_path / "ckpt") == [4, 5]  # let go: plain retention
    with pytest.raises(Exception, match=r"change feed 'mirror' on .*: batch 1, which it reads "
                                        r"next, is no longer retained .*"
                                        r"raise spark.dstl.stateStore.maxBatchesHeldForFeeds"):
        run_consumer(spark, tmp_path / "ckpt", tmp_path / "feed", batches)


def test_the_batch_change_feed_of_a_cleaned_up_batch_names_the_retention_setting(
        spark: Any, tmp_path: Path, frames: list[Any]) -> None:
    from pyspark.errors import SparkRuntimeException

    import pyspark_dstl

    write_inputs(tmp_path / "in", frames)
    run_producer(spark, tmp_path / "in", tmp_path / "ckpt", RETAIN)
    assert committed(tmp_path / "ckpt") == [4, 5]
    pyspark_dstl.install()
    try:
        reader = (spark.read.format("statestore").option("stateVarName", "items")
                  .option("readChangeFeed", "true").option("changeStartBatchId", 2))
        with pytest.raises(SparkRuntimeException) as caught:
            reader.load(str(tmp_path / "ckpt"))
        retained = change_feed_frame(spark, tmp_path / "ckpt", 4).collect()
    finally:
        pyspark_dstl.uninstall()
    assert caught.value.getCondition() == "STDS_COMMITTED_BATCH_UNAVAILABLE"
    assert ("batch 2 is no longer retained: cleanup keeps the newest "
            "spark.dstl.stateStore.minBatchesToRetain") in str(caught.value)
    assert {row["batch_id"] for row in retained} == {4, 5}


def change_feed_frame(spark: Any, location: Path, start: int) -> Any:
    return (spark.read.format("statestore").option("stateVarName", "items")
            .option("readChangeFeed", "true").option("changeStartBatchId", start)
            .load(str(location)))
