"""Rescaling in real PySpark: a query started with another partition count redistributes its
state (timers included) and continues with the outputs of a run that never rescaled; every key
then sits in the partition Spark's own `pmod(hash(key), n)` assigns; the drop-in switch
rescales when `spark.sql.shuffle.partitions` changes."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.spark import StatefulStream, read_state, stateful
from tests.support.compat_processors import RunningCountPandas
from tests.support.compat_runs import input_stream, keeping_sink, write_inputs
from tests.support.paths import FIXTURES
from tests.support.spark import (
    COUNT_SCHEMA,
    CountProcessor,
    batch_frame,
    count_model,
    make_batches,
    stored_counts,
)
from tests.support.time_processors import EVENT_SCHEMA, SESSION_SCHEMA, InactivitySessions

pytestmark = pytest.mark.spark

Rows = dict[int, list[tuple[Any, ...]]]


def commit_entries(checkpoint: str) -> dict[int, Any]:
    """The newest entry of every batch, by batch id."""
    storage = ChangelogService(Path(checkpoint).as_uri(), ChangelogSettings())
    try:
        log = CommitLog(storage)
        return {batch_id: log.read(batch_id) for batch_id in log.batch_ids()}
    finally:
        storage.close()


def assert_keys_where_spark_hashes_them(spark: Any, checkpoint: str, partitions: int,
                                        batch_id: int | None = None) -> None:
    """Every stored row's partition owns the key group of Spark's own
    pmod(hash(user), 4096): floor(group * partitions / 4096)."""
    from pyspark.sql import functions as F

    state = read_state(spark, checkpoint, batch_id).toPandas()
    users = sorted({json.loads(key)[0] for key in state["key"]})
    expected = {row["user"]: row["p"] for row in spark.createDataFrame(
        [(u,) for u in users], "user string").select(
        "user", F.expr(f"cast(pmod(hash(user), 4096) * {partitions} div 4096 as int)")
        .alias("p")).collect()}
    assert len(state) > 0
    for key, partition in zip(state["key"], state["partition"], strict=True):
        assert partition == expected[json.loads(key)[0]], key


def count_stream(spark: Any, frame: Any, checkpoint: Path, partitions: int | None,
                 ) -> StatefulStream:
    return (stateful(batch_frame(spark, frame)).group_by("user")
            .process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=str(checkpoint),
                     partitions=partitions))


def test_a_new_partition_count_rescales_the_state_and_the_query_continues(
        spark: Any, tmp_path: Path) -> None:
    frames = make_batches(4, rows=300, keys=120, seed=21)
    checkpoint = tmp_path / "ckpt"
    for batch_id, partitions in enumerate((4, 4, 3, None)):  # None: as recorded
        count_stream(spark, frames[batch_id], checkpoint, partitions).run_batch(
            batch_frame(spark, frames[batch_id]), batch_id)
    entries = commit_entries(str(checkpoint))
    assert [entries[b].operators["stateful"].num_partitions for b in range(4)] == [4, 4, 3, 3]
    record = entries[2].extra["rescale"]
    assert (record["from_partitions"], record["to_partitions"], record["batch_id"],
            record["mode"]) == (4, 3, 1, "online")
    assert "rescale" not in entries[3].extra
    assert entries[3].extra["key_types"] == ["string"]
    assert stored_counts(spark, str(checkpoint)) == count_model(frames)
    assert_keys_where_spark_hashes_them(spark, str(checkpoint), 3)


def test_offline_rescale_then_a_restart_runs_on_the_new_layout(spark: Any,
                                                               tmp_path: Path) -> None:
    from pyspark_dstl.cli import main

    frames = make_batches(3, rows=300, keys=120, seed=22)
    checkpoint = tmp_path / "ckpt"
    for batch_id in range(2):
        count_stream(spark, frames[batch_id], checkpoint, 2).run_batch(
            batch_frame(spark, frames[batch_id]), batch_id)
    assert main(["rescale", checkpoint.as_uri(), "--partitions", "5"]) == 0
    assert_keys_where_spark_hashes_them(spark, str(checkpoint), 5)
    count_stream(spark, frames[2], checkpoint, None).run_batch(batch_frame(spark, frames[2]), 2)
    assert commit_entries(str(checkpoint))[2].operators["stateful"].num_partitions == 5
    assert stored_counts(spark, str(checkpoint)) == count_model(frames)


# --- side by side: sessions closed by event-time timers, 3 -> 7 -> 2 partitions ---------------

SECOND = 1_000


def session_batches() -> list[pd.DataFrame]:
    """Eight batches, event time 20 s further each; users fall silent after different batches
    (some come back), so their 30 s session timers come due in every batch from the third,
    the batches right after each rescale included."""
    frames = []
    for batch in range(8):
        users = [f"u{k}" for k in range(60) if batch < k % 9 or (k % 4 == 0 and batch >= 5)]
        base = pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(seconds=20 * batch)
        frames.append(pd.DataFrame({
            "user": users,
            "ts": [base + pd.Timedelta(milliseconds=(k * 137) % 5000)
                   for k in range(len(users))]}))
    return frames


def run_sessions(spark: Any, checkpoint: Path, partitions_by_batch: list[int],
                 first_batch: int = 0) -> Rows:
    outputs: Rows = {}

    def sink_for(batch_id: int) -> Callable[[Any, int], None]:
        def sink(df: Any, _: int) -> None:
            outputs[batch_id] = sorted(tuple(row) for row in df.collect())
        return sink

    batches = session_batches()[first_batch:]
    for batch_id, (frame, partitions) in enumerate(zip(batches, partitions_by_batch,
                                                       strict=True), start=first_batch):
        data = spark.createDataFrame(frame, EVENT_SCHEMA)
        stream = (stateful(data).group_by("user")
                  .process(InactivitySessions(), SESSION_SCHEMA,
                           checkpoint_location=str(checkpoint),
                           partitions=partitions, time_mode="event_time", event_time="ts",
                           watermark_delay="10 seconds")
                  .foreach_batch(sink_for(batch_id)))
        stream.run_batch(data, batch_id)
    return outputs


@pytest.mark.slow
def test_outputs_after_rescales_3_7_2_equal_those_of_a_run_that_never_rescaled(
        spark: Any, tmp_path: Path) -> None:
    steady = run_sessions(spark, tmp_path / "steady", [3] * 8)
    rescaled = run_sessions(spark, tmp_path / "rescaled", [3, 3, 3, 7, 7, 7, 2, 2])
    assert rescaled == steady
    assert steady[3] and steady[6], "timers must fire in the batches right after the rescales"
    entries = commit_entries(str(tmp_path / "rescaled"))
    assert [entries[b].operators["stateful"].num_partitions for b in range(8)] == \
        [3, 3, 3, 7, 7, 7, 2, 2]
    assert_keys_where_spark_hashes_them(spark, str(tmp_path / "rescaled"), 2)
    state = read_state(spark, str(tmp_path / "steady")).toPandas()
    moved = read_state(spark, str(tmp_path / "rescaled")).toPandas()
    columns = ["state_variable", "kind", "key", "map_key", "value"]
    assert sorted(map(tuple, state[columns].astype(str).values)) == \
        sorted(map(tuple, moved[columns].astype(str).values))
    assert (moved["kind"] == "timer").any()


HASH_LAYOUT = FIXTURES / "hash_layout_sessions"


@pytest.mark.slow
def test_a_checkpoint_of_the_hash_layout_is_migrated_once_and_continues_exactly(
        spark: Any, tmp_path: Path) -> None:
    """Written before key groups (its first three batches, 3 partitions): the next start
    migrates it key by key, later rescales move ranges, and every output equals a run that
    was in key groups from the start."""
    steady = run_sessions(spark, tmp_path / "steady", [3] * 8)
    shutil.copytree(HASH_LAYOUT, tmp_path / "old")
    continued = run_sessions(spark, tmp_path / "old", [3, 3, 7, 7, 2], first_batch=3)
    assert continued == {batch: steady[batch] for batch in range(3, 8)}
    entries = commit_entries(str(tmp_path / "old"))
    assert "layout" not in entries[2].extra
    migration, rescale = entries[3].extra["rescale"], entries[5].extra["rescale"]
    assert (migration["migration"], migration["from_partitions"], migration["to_partitions"]) \
        == (True, 3, 3)
    assert (rescale["method"], rescale["from_partitions"], rescale["to_partitions"]) == \
        ("ranges of key groups", 3, 7)
    assert all(entries[b].extra["layout"] == {"key_groups": 4096} for b in range(3, 8))
    assert_keys_where_spark_hashes_them(spark, str(tmp_path / "old"), 2)


# --- the drop-in switch ---------------------------------------------------------------------------


def test_the_switch_rescales_when_shuffle_partitions_change(dropin: Any, tmp_path: Path) -> None:
    frames = make_batches(4, rows=200, keys=60, seed=23)
    inputs, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    outputs: dict[int, Any] = {}
    before = dropin.conf.get("spark.sql.shuffle.partitions")

    def run(shuffle: int) -> None:
        dropin.conf.set("spark.sql.shuffle.partitions", str(shuffle))
        query = (input_stream(dropin, inputs, "user string, v long").groupBy("user")
                 .transformWithStateInPandas(RunningCountPandas(), COUNT_SCHEMA, "Update", "None")
                 .writeStream.foreachBatch(keeping_sink(outputs))
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None

    try:
        write_inputs(inputs, frames[:2])
        run(4)
        write_inputs(inputs, frames[2:], start=2)
        run(3)
    finally:
        dropin.conf.set("spark.sql.shuffle.partitions", before)
    entries = commit_entries(str(checkpoint))
    assert [entries[b].operators["stateful"].num_partitions for b in range(4)] == [4, 4, 3, 3]
    assert entries[2].extra["rescale"]["from_partitions"] == 4
    for batch_id in range(4):
        model = count_model(frames[: batch_id + 1])
        assert {row["user"]: row["count"] for row in outputs[batch_id]} == \
            {user: model[user] for user in set(frames[batch_id]["user"])}


def test_more_partitions_than_key_groups_are_refused_before_any_batch(spark: Any,
                                                                      tmp_path: Path) -> None:
    from pyspark_dstl.spark import PartitionCountError

    frames = make_batches(1, rows=20, keys=5, seed=27)
    with pytest.raises(PartitionCountError, match=r"4097 state partitions.*1\.\.4096"):
        count_stream(spark, frames[0], tmp_path / "ckpt", 4097).run_batch(
            batch_frame(spark, frames[0]), 0)
    assert not (tmp_path / "ckpt" / "commits").exists() or \
        not any((tmp_path / "ckpt" / "commits").iterdir())


def test_a_query_with_other_key_column_types_is_refused_naming_them(spark: Any,
                                                                   tmp_path: Path) -> None:
    from pyspark_dstl.spark import PartitionCountError

    frames = make_batches(2, rows=100, keys=30, seed=24)
    checkpoint = tmp_path / "ckpt"
    count_stream(spark, frames[0], checkpoint, 2).run_batch(batch_frame(spark, frames[0]), 0)
    numbered = batch_frame(spark, frames[1]).selectExpr(
        "cast(length(user) as int) as user", "v")
    stream = (stateful(numbered).group_by("user")
              .process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=str(checkpoint)))
    with pytest.raises(PartitionCountError, match=r"types \['string'\].*\['int'\]"):
        stream.run_batch(numbered, 1)


def test_a_checkpoint_that_records_no_key_types_rescales_with_the_querys(
        spark: Any, tmp_path: Path) -> None:
    """Entries written before rescaling existed lack `key_types`: the query's types serve."""
    from pyspark_dstl.backend.backend_settings import FencingSettings
    from pyspark_dstl.backend.fencing.lease import acquire

    frames = make_batches(3, rows=300, keys=100, seed=25)
    checkpoint = tmp_path / "ckpt"
    for batch_id in range(2):
        count_stream(spark, frames[batch_id], checkpoint, 4).run_batch(
            batch_frame(spark, frames[batch_id]), batch_id)
    storage = ChangelogService(checkpoint.as_uri(), ChangelogSettings())
    lease = acquire(storage, FencingSettings())
    try:  # the newest entry as an older version wrote it: no key types
        log = CommitLog(storage)
        entry = log.read(1)
        legacy = {k: v for k, v in entry.extra.items() if k != "key_types"}
        log.write(1, dataclasses.replace(entry, extra=legacy), lease=lease, rerun=True)
    finally:
        lease.release()
        storage.close()
    assert "key_types" not in commit_entries(str(checkpoint))[1].extra
    count_stream(spark, frames[2], checkpoint, 3).run_batch(batch_frame(spark, frames[2]), 2)
    entry = commit_entries(str(checkpoint))[2]
    assert entry.operators["stateful"].num_partitions == 3
    assert entry.extra["key_types"] == ["string"] and entry.extra["rescale"]["to_partitions"] == 3
    assert stored_counts(spark, str(checkpoint)) == count_model(frames)
    assert_keys_where_spark_hashes_them(spark, str(checkpoint), 3)


def test_a_batch_run_again_after_the_rescale_it_began_with_rescales_again(
        spark: Any, tmp_path: Path) -> None:
    """The engine may run a committed batch again (its own commit was lost): it builds on the
    batch before, still in the old layout, so the rescale is done again with new stores."""
    frames = make_batches(4, rows=300, keys=100, seed=26)
    checkpoint = tmp_path / "ckpt"
    for batch_id, partitions in enumerate((4, 4, 3)):
        count_stream(spark, frames[batch_id], checkpoint, partitions).run_batch(
            batch_frame(spark, frames[batch_id]), batch_id)
    first = commit_entries(str(checkpoint))[2]
    count_stream(spark, frames[2], checkpoint, 3).run_batch(batch_frame(spark, frames[2]), 2)
    again = commit_entries(str(checkpoint))[2]
    assert again.extra["rescale"]["from_partitions"] == 4
    assert {i.unique_id for i in again.operators["stateful"].stores.values()}.isdisjoint(
        i.unique_id for i in first.operators["stateful"].stores.values())
    count_stream(spark, frames[3], checkpoint, None).run_batch(batch_frame(spark, frames[3]), 3)
    assert stored_counts(spark, str(checkpoint)) == count_model(frames)
