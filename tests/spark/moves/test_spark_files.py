"""The Spark checkpoint files export-state writes itself (spark/moves/spark_files.py), as plain
files; that Spark's own reader and operator take them is tested with real PySpark in
test_export_state.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyspark_dstl.spark.moves.spark_files import place_logs, place_operator_metadata

TICK = '{"tick":-1}'


def engine_checkpoint(root: Path) -> Path:
    """The logs of a query of this backend with a time mode: its source, then the tick
    source."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "sources" / "0").mkdir(parents=True)
    (root / "metadata").write_text('{"id":"q"}')
    (root / "sources" / "0" / "0").write_text('v1\n{"path":"file:///in/0","batchId":0}')
    for batch in (3, 4):
        (root / "offsets" / str(batch)).write_text(
            f'v1\n{{"batchWatermarkMs":{batch},"batchTimestampMs":9,"conf":{{"k":"old"}}}}\n'
            f'{{"logOffset":{batch}}}\n{TICK}')
    return root


def test_the_offset_entries_keep_the_querys_own_sources_and_take_the_batchs_clocks(
        tmp_path: Path) -> None:
    engine = engine_checkpoint(tmp_path / "engine")
    target = tmp_path / "spark"
    target.mkdir()
    place_logs(engine, target, 4, {"spark.sql.shuffle.partitions": "2"}, 4000, 1234, 5000)

    assert (target / "offsets" / "3").read_text().splitlines() == [
        "v1", '{"batchWatermarkMs":3,"batchTimestampMs":9,"conf":{"k":"old"}}',
        '{"logOffset":3}']
    lines = (target / "offsets" / "4").read_text().splitlines()
    assert lines[0] == "v1" and lines[2:] == ['{"logOffset":4}']
    assert json.loads(lines[1]) == {"batchWatermarkMs": 4000, "batchTimestampMs": 1234,
                                    "conf": {"spark.sql.shuffle.partitions": "2"}}
    assert (target / "commits" / "4").read_text() == 'v1\n{"nextBatchWatermarkMs": 5000}'
    assert (target / "metadata").read_text() == '{"id":"q"}'
    assert (target / "sources" / "0" / "0").is_file()
    assert sorted(p.name for p in (target / "offsets").iterdir()) == ["3", "4"]


def test_nothing_already_there_is_replaced(tmp_path: Path) -> None:
    engine = engine_checkpoint(tmp_path / "engine")
    target = tmp_path / "spark"
    (target / "commits").mkdir(parents=True)
    (target / "commits" / "4").write_text("someone else's")
    with pytest.raises(FileExistsError):
        place_logs(engine, target, 4, {}, 0, 0, 0)
    assert (target / "commits" / "4").read_text() == "someone else's"


def test_the_operator_metadata_names_the_schema_files_where_the_checkpoint_will_be(
        tmp_path: Path) -> None:
    staging, target, final = tmp_path / "staging", tmp_path / "assembled", tmp_path / "spark"
    schema = staging / "state" / "0" / "_stateSchema" / "default" / "0_abc"
    schema.parent.mkdir(parents=True)
    schema.write_bytes(b"schema")
    metadata = {"operatorInfo": {"operatorId": 0},
                "stateStoreInfo": [{"storeName": "default",
                                    "stateSchemaFilePaths": [f"file:{schema}"]}]}
    (staging / "state" / "0" / "_metadata" / "v2").mkdir(parents=True)
    (staging / "state" / "0" / "_metadata" / "v2" / "2").write_text(
        "v2\n" + json.dumps(metadata))

    place_operator_metadata(staging, target, final, 2, 7)

    lines = (target / "state" / "0" / "_metadata" / "v2" / "7").read_text().splitlines()
    assert lines[0] == "v2"
    assert json.loads(lines[1])["stateStoreInfo"][0]["stateSchemaFilePaths"] == [
        f"file:{final}/state/0/_stateSchema/default/0_abc"]
    assert (target / "state" / "0" / "_stateSchema" / "default" / "0_abc").read_bytes() == \
        b"schema"
