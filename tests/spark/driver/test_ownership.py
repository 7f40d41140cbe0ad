"""Who owns a checkpoint location (spark/driver/ownership.py): move records, move markers in
Spark's offset log, and the check a query of this backend makes before it writes anything.
Spark's side of the same marks (its refusal, quoting the marker) is tested with real PySpark in
tests/spark/moves/."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl import LocationMovedError, MoveRecordError, SparkCheckpointHereError
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.spark.driver.ownership import (
    DONE,
    STARTED,
    TO_DSTL,
    TO_SPARK,
    MoveRecord,
    check_location,
    location_status,
    marker_bytes,
    processor_name,
    read_moves,
    spark_logs,
    write_marker,
    write_move,
)

PROCESSOR = "jobs.sessions:Sessions"


@pytest.fixture
def location(tmp_path: Path) -> Path:
    return tmp_path / "ckpt"


@pytest.fixture
def storage(location: Path) -> Iterator[ChangelogService]:
    location.mkdir()
    service = ChangelogService(location.as_uri())
    yield service
    service.close()


def spark_checkpoint(root: Path, offsets: int, commits: int) -> None:
    """Spark's logs as Spark writes them (a version line, a JSON line, one offset per source),
    with Hadoop's checksum files beside them."""
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "commits").mkdir(exist_ok=True)
    (root / "metadata").write_text('{"id":"0b5c7f9e-0000-0000-0000-000000000000"}')
    for batch in range(offsets):
        meta = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'
        (root / "offsets" / str(batch)).write_text(f'v1\n{meta}\n{{"logOffset":{batch}}}')
        (root / "offsets" / f".{batch}.crc").write_bytes(b"crc")
    for batch in range(commits):
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_move_records_are_numbered_in_order_and_read_back_whole(
        storage: ChangelogService, location: Path) -> None:
    first = write_move(storage, MoveRecord(TO_DSTL, STARTED, 4, location.as_uri(), {"a": 1}))
    second = write_move(storage, MoveRecord(TO_DSTL, DONE, 4, location.as_uri()))
    assert (first.sequence, second.sequence) == (0, 1)
    assert sorted(p.name for p in (location / "moves").iterdir()) == ["0", "1"]
    assert [(m.kind, m.phase, m.batch_id, dict(m.details)) for m in read_moves(storage)] == [
        (TO_DSTL, STARTED, 4, {"a": 1}), (TO_DSTL, DONE, 4, {})]


def test_a_damaged_move_record_is_refused_naming_its_file(storage: ChangelogService,
                                                         location: Path) -> None:
    write_move(storage, MoveRecord(TO_SPARK, STARTED, 2, "file:///elsewhere"))
    path = location / "moves" / "0"
    document = json.loads(path.read_text())
    document["record"]["batch_id"] = 3
    path.chmod(0o644)
    path.write_text(json.dumps(document))
    with pytest.raises(MoveRecordError, match=r"^move record 'moves/0' fails its checksum"):
        read_moves(storage)


def test_sparks_logs_are_told_from_markers_past_the_last_commit(
        storage: ChangelogService, location: Path) -> None:
    spark_checkpoint(location, offsets=3, commits=3)
    assert write_marker(storage, 3, marker_bytes("moved", {"batch_id": 2})) == "offsets/3"
    logs = spark_logs(storage)
    assert (logs.offsets, logs.commits, logs.markers) == ((0, 1, 2), (0, 1, 2), (3,))
    assert (location / "offsets" / "3").read_text().startswith("pyspark-dstl: moved\n")
    write_marker(storage, 3, marker_bytes("moved", {"batch_id": 2}))  # a repeated move: fine


def test_a_location_with_only_sparks_checkpoint_is_refused_with_the_commands(
        storage: ChangelogService, location: Path) -> None:
    spark_checkpoint(location, offsets=2, commits=2)
    with pytest.raises(SparkCheckpointHereError) as refused:
        check_location(storage, location.as_uri(), PROCESSOR)
    first = str(refused.value).splitlines()[0]
    assert first.startswith(f"checkpoint location {str(location)!r} holds Spark's own "
                            f"streaming checkpoint (batches up to 1 committed")
    assert (f"python -m pyspark_dstl import-state {location} {location} --processor "
            f"{PROCESSOR}") in first
    assert f"import-state {location} <new location> --processor {PROCESSOR}" in first
    assert sorted(p.name for p in location.iterdir()) == ["commits", "metadata", "offsets"]


def test_a_move_interrupted_after_its_marker_is_refused_until_it_is_finished(
        storage: ChangelogService, location: Path) -> None:
    spark_checkpoint(location, offsets=2, commits=2)
    write_marker(storage, 2, marker_bytes("moved", {}))
    assert location_status(storage).moving_in
    with pytest.raises(LocationMovedError, match=r"an in-place move of Spark's checkpoint "
                                                 r"\(after Spark's batch 1\) was interrupted"):
        check_location(storage, location.as_uri(), PROCESSOR)
    write_move(storage, MoveRecord(TO_DSTL, STARTED, 1, location.as_uri()))
    with pytest.raises(LocationMovedError, match="was interrupted; finish it"):
        check_location(storage, location.as_uri(), PROCESSOR)
    write_move(storage, MoveRecord(TO_DSTL, DONE, 1, location.as_uri()))
    check_location(storage, location.as_uri(), PROCESSOR)  # the move is done: ours


def test_a_location_exported_to_spark_is_refused_naming_the_spark_checkpoint(
        storage: ChangelogService, location: Path) -> None:
    write_move(storage, MoveRecord(TO_SPARK, STARTED, 7, "file:///data/spark"))
    with pytest.raises(LocationMovedError, match=r"an export-state of its state to the Spark "
                                                 r"checkpoint 'file:///data/spark' \(after "
                                                 r"batch 7\) was interrupted; run it again"):
        check_location(storage, location.as_uri(), None)
    write_move(storage, MoveRecord(TO_SPARK, DONE, 7, "file:///data/spark"))
    with pytest.raises(LocationMovedError) as refused:
        check_location(storage, location.as_uri(), None)
    assert str(refused.value).startswith(
        f"checkpoint location {str(location)!r} was moved back to Spark's operator by "
        f"export-state after batch 7: its state now lives in the Spark checkpoint "
        f"'file:///data/spark'; start the query without pyspark_dstl.install()")
    assert "--processor <module:Class>" in str(refused.value)


def test_a_new_location_passes_the_check_without_writing(storage: ChangelogService,
                                                        location: Path) -> None:
    check_location(storage, location.as_uri(), PROCESSOR)
    assert list(location.iterdir()) == []


class Local:
    pass


def test_the_command_names_a_processor_only_when_its_class_can_be_imported() -> None:
    assert processor_name(MoveRecord(TO_DSTL, DONE, 0, "x")) == (
        "pyspark_dstl.spark.driver.ownership:MoveRecord")
    assert processor_name(Local()) == f"{__name__}:Local"

    class Inner:
        pass

    assert processor_name(Inner()) is None
