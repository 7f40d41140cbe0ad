"""The stateful operator in real PySpark (local[2,4]): exact state through retries, re-executed
stages, restarts, materialization and cleanup; settings and partition checks; the state reader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.spark import (
    stateful,
)
from pyspark_dstl.spark.stage.open_stores import executor_stores
from tests.support.spark import (
    COUNT_SCHEMA,
    CountProcessor,
    FailAfterCommitProcessor,
    Outputs,
    VectorizedCountProcessor,
    batch_frame,
    count_model,
    file_stream,
    make_batches,
    run_files,
    stored_counts,
    write_batches,
)

pytestmark = pytest.mark.spark

def files_under(root: Path, suffix: str) -> list[Path]:
    return sorted(p for p in root.rglob(f"*{suffix}") if p.is_file())


def test_keyed_count_over_twenty_batches_equals_a_pandas_model(spark: Any,
                                                               tmp_path: Path) -> None:
    frames = make_batches(22, rows=400, keys=150, seed=1)
    write_batches(tmp_path / "in", frames)
    outputs: Outputs = {}
    stream = run_files(spark, tmp_path / "in", tmp_path / "ckpt", outputs=outputs, partitions=4)
    assert [p.batch_id for p in stream.progress] == list(range(22))
    for batch_id, frame in enumerate(frames):
        model = count_model(frames[: batch_id + 1])
        assert outputs[batch_id] == {user: model[user] for user in set(frame["user"])}
    assert stored_counts(spark, str(tmp_path / "ckpt")) == count_model(frames)


def test_vectorized_processor_keeps_the_same_state_as_the_per_key_one(
        spark: Any, tmp_path: Path) -> None:
    frames = make_batches(3, rows=600, keys=200, seed=2)
    for name, processor in (("per-key", CountProcessor()),
                            ("vectorized", VectorizedCountProcessor())):
        stream = (stateful(batch_frame(spark, frames[0])).group_by("user")
                  .process(processor, COUNT_SCHEMA, checkpoint_location=str(tmp_path / name),
                           partitions=3))
        for batch_id, frame in enumerate(frames):
            stream.run_batch(batch_frame(spark, frame), batch_id)
    assert stored_counts(spark, str(tmp_path / "per-key")) == count_model(frames)
    assert stored_counts(spark, str(tmp_path / "vectorized")) == count_model(frames)


def test_task_retried_after_its_commit_commits_the_retry(spark: Any, tmp_path: Path) -> None:
    frames = make_batches(3, rows=300, keys=80, seed=3)
    operator = (stateful(batch_frame(spark, frames[0])).group_by("user")
                .process(FailAfterCommitProcessor(), COUNT_SCHEMA,
                         checkpoint_location=str(tmp_path / "ckpt"), partitions=2).operator)
    for batch_id, frame in enumerate(frames):
        result = operator.execute(batch_frame(spark, frame), batch_id)
        assert result.stats[0]["attempt"] == 1 and result.stats[1]["attempt"] == 0
        operator.commit(result)
    # attempt 0 of partition 0 committed a changelog too: one more file per batch than kept
    changelogs = files_under(tmp_path / "ckpt" / "state" / "stateful" / "0", ".changelog")
    committed = {f"{v}_{uid}" for v, uid in result.infos[0].lineage}
    assert len(changelogs) >= 2 * len(frames)
    assert {p.name.split(".")[0] for p in changelogs} > committed
    assert stored_counts(spark, str(tmp_path / "ckpt")) == count_model(frames)


def test_stage_run_twice_gives_two_unique_ids_for_one_version(spark: Any,
                                                               tmp_path: Path) -> None:
    frames = make_batches(2, rows=300, keys=60, seed=4)
    operator = (stateful(batch_frame(spark, frames[0])).group_by("user")
                .process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=str(tmp_path / "ckpt"),
                         partitions=2).operator)
    first = operator.execute(batch_frame(spark, frames[0]), 0)
    second = operator.execute(batch_frame(spark, frames[0]), 0)
    for partition in (0, 1):
        a, b = first.infos[partition], second.infos[partition]
        assert a.version == b.version == 1 and a.unique_id != b.unique_id
    operator.commit(second)
    following = operator.execute(batch_frame(spark, frames[1]), 1)
    operator.commit(following)
    for partition in (0, 1):
        info = following.infos[partition]
        assert info.base_unique_id == second.infos[partition].unique_id
        assert [uid for _, uid in info.lineage][-2:] == [second.infos[partition].unique_id,
                                                         info.unique_id]
    assert stored_counts(spark, str(tmp_path / "ckpt")) == count_model(frames)


def test_restart_continues_from_the_checkpoint(spark: Any, tmp_path: Path) -> None:
    frames = make_batches(8, rows=300, keys=100, seed=5)
    write_batches(tmp_path / "in", frames[:4])
    run_files(spark, tmp_path / "in", tmp_path / "ckpt", partitions=3)
    write_batches(tmp_path / "in", frames[4:], start=4)
    stream = run_files(spark, tmp_path / "in", tmp_path / "ckpt")  # partitions as recorded
    assert [p.batch_id for p in stream.progress] == [4, 5, 6, 7]
    assert stored_counts(spark, str(tmp_path / "ckpt")) == count_model(frames)


def test_restart_after_the_driver_died_between_the_two_commits(spark: Any,
                                                                tmp_path: Path) -> None:
    frames = make_batches(4, rows=300, keys=100, seed=6)
    write_batches(tmp_path / "in", frames)
    outputs: Outputs = {}
    run_files(spark, tmp_path / "in", tmp_path / "ckpt", outputs=outputs, partitions=2)
    # what a driver dying after our commit log entry and before the engine's commit leaves:
    engine_commits = tmp_path / "ckpt" / "engine" / "commits"
    (engine_commits / "3").unlink()
    (engine_commits / ".3.crc").unlink(missing_ok=True)
    stream = run_files(spark, tmp_path / "in", tmp_path / "ckpt", outputs=outputs)
    assert [p.batch_id for p in stream.progress] == [3]
    assert stream.progress[0].commit_path == "commits/3.1"
    assert stored_counts(spark, str(tmp_path / "ckpt")) == count_model(frames)
    assert outputs[3] == {u: count_model(frames)[u] for u in set(frames[3]["user"])}


def test_materialization_truncation_and_cleanup_happen_during_a_run(spark: Any,
                                                                    tmp_path: Path) -> None:
    frames = make_batches(14, rows=300, keys=120, seed=7)
    write_batches(tmp_path / "in", frames[:12])
    settings = {"materialization.everyNCommits": "1", "materialization.interval": "off",
                "stateStore.minBatchesToRetain": "3", "query.cleanupInterval": "2"}
    stream = run_files(spark, tmp_path / "in", tmp_path / "ckpt", partitions=2, settings=settings)
    root = tmp_path / "ckpt"
    state = root / "state" / "stateful"
    assert files_under(state, ".snapshot"), "no snapshot was materialized"
    assert sum(p.materialized_partitions for p in stream.progress) > 0
    assert sum(p.cleanup_deleted_files for p in stream.progress) > 0
    commits = len(stream.progress) * 2  # each commit of each partition wrote a changelog
    assert len(files_under(state, ".changelog")) < commits  # truncated and cleaned up
    assert len(list((root / "commits").iterdir())) <= 3 + 2  # retention + cleanup interval
    write_batches(tmp_path / "in", frames[12:], start=12)
    run_files(spark, tmp_path / "in", root, settings=settings)
    assert stored_counts(spark, str(root)) == count_model(frames)


def test_partitions_moving_between_workers_are_taken_over_and_snapshot_at_the_default_pace(
        spark: Any, tmp_path: Path) -> None:
    frames = make_batches(14, rows=200, keys=80, seed=13)
    write_batches(tmp_path / "in", frames)
    # default everyNCommits (10); no interval, so only the lineage count can trigger one
    stream = run_files(spark, tmp_path / "in", tmp_path / "ckpt", partitions=4,
                       settings={"materialization.interval": "off"})
    kinds = [p.load_kinds for p in stream.progress]
    assert kinds[0] == {"empty": 4}
    assert all(set(k) <= {"reuse", "local_reuse"} for k in kinds[1:]), kinds  # no restore
    snapshots = files_under(tmp_path / "ckpt" / "state" / "stateful", ".snapshot")
    assert {p.name.split("_")[0] for p in snapshots} == {"10"}  # one per partition, at v10
    assert stream.progress[-1].materialized_partitions == 4  # adopted by whoever came next
    assert stored_counts(spark, str(tmp_path / "ckpt")) == count_model(frames)


def test_invalid_setting_fails_at_query_start_naming_the_key(spark: Any,
                                                             tmp_path: Path) -> None:
    grouped = stateful(file_stream(spark, tmp_path)).group_by("user")
    with pytest.raises(ConfigError, match=r"spark\.dstl\.changelog\.persistDelay"):
        grouped.process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=str(tmp_path / "c"),
                        settings={"changelog.persistDelay": "soon"})
    spark.conf.set("spark.dstl.stateStore.bogus", "1")
    try:
        with pytest.raises(ConfigError, match=r"spark\.dstl\.stateStore\.bogus"):
            grouped.process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=str(tmp_path / "c"))
    finally:
        spark.conf.unset("spark.dstl.stateStore.bogus")


def test_missing_checkpoint_location_is_refused(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"spark\.dstl\.query\.checkpointLocation"):
        stateful(file_stream(spark, tmp_path)).group_by("user").process(
            CountProcessor(), COUNT_SCHEMA)


def test_grouping_key_of_an_unsupported_type_is_refused(spark: Any) -> None:
    df = spark.range(3).selectExpr("cast(id as decimal(10, 2)) as t", "id")
    with pytest.raises(ValueError, match="column 't' has type decimal"):
        stateful(df).group_by("t")


@pytest.mark.version
def test_state_reader_returns_the_model_state_of_any_retained_batch(spark: Any,
                                                                     tmp_path: Path) -> None:
    frames = make_batches(3, rows=200, keys=50, seed=9)
    write_batches(tmp_path / "in", frames)
    run_files(spark, tmp_path / "in", tmp_path / "ckpt", partitions=2)
    checkpoint = str(tmp_path / "ckpt")
    for batch_id in range(3):
        assert stored_counts(spark, checkpoint, batch_id) == count_model(frames[: batch_id + 1])
    plain = (spark.read.format("dstl-state").option("batchId", 1).load(checkpoint)
             .where("state_variable = 'count'").toPandas())
    assert {json.loads(k)[0]: json.loads(v) for k, v in zip(plain.key, plain.value,
                                                             strict=True)} \
        == count_model(frames[:2])
    assert set(plain["partition"]) == {0, 1} and set(plain["kind"]) == {"value"}


def test_cache_output_mode_gives_the_same_output_and_state(spark: Any,
                                                           tmp_path: Path) -> None:
    frames = make_batches(3, rows=300, keys=90, seed=10)
    write_batches(tmp_path / "in", frames)
    outputs: Outputs = {}
    run_files(spark, tmp_path / "in", tmp_path / "ckpt", outputs=outputs, partitions=2,
              settings={"query.outputMode": "cache"})
    model = count_model(frames)
    assert outputs[2] == {user: model[user] for user in set(frames[2]["user"])}
    assert stored_counts(spark, str(tmp_path / "ckpt")) == model
    assert spark.sparkContext._jsc.getPersistentRDDs().isEmpty()


def test_keyed_count_on_the_s3_api_with_hedging(spark: Any, s3: Any, tmp_path: Path) -> None:
    frames = make_batches(4, rows=300, keys=100, seed=11)
    write_batches(tmp_path / "in", frames)
    settings = {
        **s3.query_settings(), "changelog.hedging.enabled": "true",
        "query.engineCheckpointLocation": str(tmp_path / "engine"),
    }
    stream = (stateful(file_stream(spark, tmp_path / "in")).group_by("user")
              .process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=s3.url, partitions=2,
                       settings=settings))
    stream.start(trigger={"availableNow": True}).awaitTermination()
    assert len(stream.progress) == 4
    keys = s3.direct_keys()
    assert any(k.startswith("state/stateful/0/") and k.endswith(".changelog") for k in keys)
    assert [k for k in keys if k.startswith("commits/")] == [f"commits/{b}.0" for b in range(4)]
    assert s3.proxy.count("PUT", "/") > 0
    assert stored_counts(spark, s3.url, settings=settings) == count_model(frames)


def test_driver_keeps_no_store_open(spark: Any, tmp_path: Path) -> None:
    frames = make_batches(1, rows=50, keys=10, seed=12)
    stream = (stateful(batch_frame(spark, frames[0])).group_by("user")
              .process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=str(tmp_path / "ckpt"),
                       partitions=2))
    stream.run_batch(batch_frame(spark, frames[0]), 0)
    assert stored_counts(spark, str(tmp_path / "ckpt")) == count_model(frames)
    assert executor_stores().open_stores() == []  # the commit log is all the driver touched


def test_the_stateful_stage_runs_as_one_spark_job_and_leaves_adaptive_execution_as_it_was(
        spark: Any, tmp_path: Path) -> None:
    frames = make_batches(1, rows=200, keys=40, seed=13)
    stream = (stateful(batch_frame(spark, frames[0])).group_by("user")
              .process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=str(tmp_path / "ckpt"),
                       partitions=3))
    batch = batch_frame(spark, frames[0])
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"
    group = f"stage-{tmp_path.name}"
    spark.sparkContext.setJobGroup(group, "the stateful stage of one batch")
    try:
        stream.run_batch(batch, 0)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(group)
    assert len(jobs) == 1  # shuffle and Python tasks are two stages of one job
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"
    assert stored_counts(spark, str(tmp_path / "ckpt")) == count_model(frames)
