"""outputMode "files" in real PySpark: the sink reads exactly the committed attempts' output
files, retried attempts add no rows, the driver gets the meta rows only (and small outputs up
to a bound), the files go once the batch is done, and a batch run again after its commit gives
the sink the same rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pyspark_dstl.spark import stateful
from tests.support.fault_proxy import FaultRule
from tests.support.spark import (
    COUNT_SCHEMA,
    CountProcessor,
    FailAfterCommitProcessor,
    Outputs,
    batch_frame,
    collecting_sink,
    count_model,
    file_stream,
    make_batches,
    run_files,
    stored_counts,
    write_batches,
)

pytestmark = pytest.mark.spark

FILES = {"query.outputMode": "files", "query.outputInlineBytes": "0"}  # every output a file


def output_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "output").rglob("*") if p.is_file())


def latest_counts(frames: list[Any]) -> dict[str, int]:
    """What the sink of the last batch sees: every key of that batch with its running count."""
    model = count_model(frames)
    return {user: model[user] for user in set(frames[-1]["user"])}


def test_the_sink_sees_exactly_the_stage_output_and_the_files_go_after_each_batch(
        spark: Any, tmp_path: Path) -> None:
    frames = make_batches(3, rows=400, keys=120, seed=21)
    write_batches(tmp_path / "in", frames)
    outputs: Outputs = {}
    stream = run_files(spark, tmp_path / "in", tmp_path / "ckpt", outputs=outputs,
                       partitions=3, settings=FILES)
    for batch_id in range(3):
        assert outputs[batch_id] == latest_counts(frames[: batch_id + 1])
    assert [p.output_rows for p in stream.progress] == [len(outputs[b]) for b in range(3)]
    assert stored_counts(spark, str(tmp_path / "ckpt")) == count_model(frames)
    assert output_files(tmp_path / "ckpt") == []


def test_a_task_retried_after_writing_its_output_file_adds_no_rows(
        spark: Any, tmp_path: Path) -> None:
    frames = make_batches(2, rows=300, keys=80, seed=22)
    operator = (stateful(batch_frame(spark, frames[0])).group_by("user")
                .process(FailAfterCommitProcessor(), COUNT_SCHEMA,
                         checkpoint_location=str(tmp_path / "ckpt"), partitions=2,
                         settings=FILES).operator)
    for batch_id, frame in enumerate(frames):
        result = operator.execute(batch_frame(spark, frame), batch_id)
        assert result.stats[0]["attempt"] == 1
        written = output_files(tmp_path / "ckpt")
        assert len([p for p in written if p.name.startswith("0-")]) == 2  # both attempts wrote
        rows = operator.output_frame(spark, result).collect()
        assert len(rows) == len({row["user"] for row in rows})
        assert {row["user"]: row["count"] for row in rows} == latest_counts(
            frames[: batch_id + 1])
        operator.commit(result)
        operator.release(result)
        assert output_files(tmp_path / "ckpt") == []
    assert stored_counts(spark, str(tmp_path / "ckpt")) == count_model(frames)


def test_the_driver_receives_the_meta_rows_only(spark: Any, tmp_path: Path) -> None:
    import pandas as pd

    rows = 20_000
    frame = pd.DataFrame({"user": [f"user-{i}" for i in range(rows)], "v": range(rows)})
    received = {}
    for mode in ("files", "collect"):
        operator = (stateful(batch_frame(spark, frame)).group_by("user")
                    .process(CountProcessor(), COUNT_SCHEMA,
                             checkpoint_location=str(tmp_path / mode),
                             partitions=2, settings={**FILES, "query.outputMode": mode}).operator)
        result = operator.execute(batch_frame(spark, frame), 0)
        assert operator.output_frame(spark, result).count() == rows
        received[mode] = result.driver_bytes
        assert (result.output is None) == (mode == "files")
        operator.release(result)
    assert received["files"] < 2 * 4096  # two meta rows of JSON text
    assert received["collect"] > rows * 8  # every count, at least


def test_files_mode_on_the_s3_api_survives_a_failed_output_upload(
        spark: Any, s3: Any, tmp_path: Path) -> None:
    frames = make_batches(3, rows=300, keys=100, seed=23)
    write_batches(tmp_path / "in", frames)
    settings = {
        **FILES,
        **s3.query_settings(),
        "query.engineCheckpointLocation": str(tmp_path / "engine"),
    }
    s3.proxy.add_rule(FaultRule("status", method="PUT", path_contains="/output/", status=503,
                                times=1))
    outputs: Outputs = {}
    stream = (stateful(file_stream(spark, tmp_path / "in")).group_by("user")
              .process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=s3.url, partitions=2,
                       settings=settings)
              .foreach_batch(collecting_sink(outputs)))
    stream.start(trigger={"availableNow": True}).awaitTermination()
    assert [p.batch_id for p in stream.progress] == [0, 1, 2]
    assert outputs[2] == latest_counts(frames)
    assert s3.proxy.count("PUT", "/output/") >= 2 * 3 + 1  # every file, one refused once
    assert [k for k in s3.direct_keys() if k.startswith("output/")] == []
    assert stored_counts(spark, s3.url, settings=settings) == count_model(frames)


def test_a_batch_run_again_after_its_commit_gives_the_sink_the_same_rows(
        spark: Any, tmp_path: Path) -> None:
    frames = make_batches(4, rows=300, keys=100, seed=24)
    write_batches(tmp_path / "in", frames)
    outputs: Outputs = {}
    run_files(spark, tmp_path / "in", tmp_path / "ckpt", outputs=outputs, partitions=2,
              settings=FILES)
    first = dict(outputs[3])
    # a driver that died after this library's commit entry and before the engine's commit
    engine_commits = tmp_path / "ckpt" / "engine" / "commits"
    (engine_commits / "3").unlink()
    (engine_commits / ".3.crc").unlink(missing_ok=True)
    stream = run_files(spark, tmp_path / "in", tmp_path / "ckpt", outputs=outputs, settings=FILES)
    assert [(p.batch_id, p.commit_path) for p in stream.progress] == [(3, "commits/3.1")]
    assert outputs[3] == first == latest_counts(frames)
    assert stored_counts(spark, str(tmp_path / "ckpt")) == count_model(frames)
    assert output_files(tmp_path / "ckpt") == []


def test_output_files_of_attempts_that_finished_late_go_at_cleanup(
        spark: Any, tmp_path: Path) -> None:
    frames = make_batches(3, rows=200, keys=50, seed=25)
    write_batches(tmp_path / "in", frames[:1])
    run_files(spark, tmp_path / "in", tmp_path / "ckpt", partitions=2, settings=FILES)
    # what a speculative attempt of batch 0 that finished after the batch leaves behind
    late = tmp_path / "ckpt" / "output" / "stateful" / "0" / "1-late-attempt.arrows"
    late.parent.mkdir(parents=True, exist_ok=True)
    late.write_bytes(b"rows of an attempt nobody reads")
    write_batches(tmp_path / "in", frames[1:], start=1)
    stream = run_files(spark, tmp_path / "in", tmp_path / "ckpt",
                       settings={**FILES, "query.cleanupInterval": "1"})
    assert not late.exists()
    assert sum(p.cleanup_deleted_files for p in stream.progress) >= 1
    assert output_files(tmp_path / "ckpt") == []


def test_small_outputs_come_with_the_meta_rows_and_write_no_file(spark: Any,
                                                                  tmp_path: Path) -> None:
    frames = make_batches(2, rows=300, keys=80, seed=26)
    operator = (stateful(batch_frame(spark, frames[0])).group_by("user")
                .process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=str(tmp_path / "ckpt"),
                         partitions=2, settings={"query.outputMode": "files",
                                                 "query.outputInlineBytes": "1m"}).operator)
    for batch_id, frame in enumerate(frames):
        result = operator.execute(batch_frame(spark, frame), batch_id)
        assert output_files(tmp_path / "ckpt") == []
        rows = operator.output_frame(spark, result).collect()
        assert {row["user"]: row["count"] for row in rows} == latest_counts(
            frames[: batch_id + 1])
        assert len(rows) == len(latest_counts(frames[: batch_id + 1]))
        operator.commit(result)
        operator.release(result)
    assert stored_counts(spark, str(tmp_path / "ckpt")) == count_model(frames)
