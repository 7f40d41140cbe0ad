"""State schema records, the backend's format (backend/lineage/schema_records.py): written and
read back, a damaged, foreign or renamed file refused by name, the chain a commit names, and
what inspect and verify report of them, all without pyspark."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_errors import CorruptCheckpointError, SchemaRecordError
from pyspark_dstl.backend.lineage.commit_entry import CommitEntry
from pyspark_dstl.backend.lineage.schema_records import (
    RECORD,
    Declarations,
    SchemaRecord,
    StateDeclaration,
    chain_of,
    decode_record,
    encode_record,
    history_at,
    read_records,
    record_path,
)
from pyspark_dstl.backend.ops.schema_report import (
    describe_schema_records,
    schema_record_problems,
)
from pyspark_dstl.changelog.changelog_service import ChangelogService

KEY = '{"type": "struct", "fields": [{"name": "user", "type": "string", "nullable": true}]}'
VALUE = '{"type": "struct", "fields": [{"name": "count", "type": "long", "nullable": true}]}'
MAP_KEY = '{"type": "struct", "fields": [{"name": "item", "type": "string", "nullable": true}]}'
DECLARED = Declarations(KEY, {"count": StateDeclaration("value", VALUE),
                              "items": StateDeclaration("map", VALUE, MAP_KEY, ttl=True)})


def record(schema_id: int, base: int | None = None) -> SchemaRecord:
    return SchemaRecord.from_dict(SchemaRecord(schema_id, base, DECLARED, 1234).to_dict())


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[ChangelogService]:
    with ChangelogService((tmp_path / "ckpt").as_uri()) as opened:
        yield opened


def put(storage: ChangelogService, path: str, data: bytes) -> None:
    storage.loop.run(storage.aput(path, data))


def committed(schema_id: int | None) -> CommitEntry:
    extra = {} if schema_id is None else {"state_schemas": {"op": schema_id}}
    return CommitEntry(0, {}, extra=extra)


def test_a_record_round_trips_with_its_schemas_in_one_spelling() -> None:
    written = record(3, 1)
    assert decode_record(encode_record(written), "schemas/op/3.json") == written
    assert json.loads(encode_record(written))["magic"] == "DSTL-STATE-SCHEMA"


def test_a_damaged_record_is_a_corrupt_checkpoint_naming_the_file() -> None:
    damaged = encode_record(record(3)).replace(b'"long"', b'"int"')
    with pytest.raises(SchemaRecordError, match=r"^state schema record 'schemas/op/3.json' "
                                                r"fails its checksum$") as caught:
        decode_record(damaged, "schemas/op/3.json")
    assert isinstance(caught.value, CorruptCheckpointError)
    with pytest.raises(SchemaRecordError, match="more than a record may hold"):
        decode_record(b" " * (16 * 1024 * 1024 + 1), "schemas/op/3.json")


def test_a_record_of_the_wrong_shape_is_malformed_by_name() -> None:
    document = json.loads(encode_record(record(3)))
    body = {**document["record"], "schema_id": -1}
    with pytest.raises(SchemaRecordError, match=r"^state schema record 'schemas/op/3.json' is "
                                                r"malformed: ValueError: a schema id"):
        decode_record(RECORD.encode(body), "schemas/op/3.json")


def test_reading_ignores_other_names_and_refuses_a_renamed_record(
        storage: ChangelogService) -> None:
    put(storage, record_path("op", 0), encode_record(record(0)))
    put(storage, "schemas/op/notes.txt", b"not a record")
    put(storage, "schemas/other/0.json", encode_record(record(0)))
    assert list(read_records(storage, "op")) == [0]
    put(storage, record_path("op", 2), encode_record(record(1)))
    with pytest.raises(SchemaRecordError, match=r"'schemas/op/2.json' holds schema id 1; the "
                                                r"file was renamed or damaged"):
        read_records(storage, "op")


def test_the_chain_a_commit_names_needs_every_record_of_it() -> None:
    records = {0: record(0), 2: record(2, 1)}
    with pytest.raises(SchemaRecordError, match=r"^state schema record 'schemas/op/1.json' is "
                                                r"missing, but the committed state refers to "
                                                r"it \(through schema id 2\)"):
        chain_of(records, 2, "op")
    assert [r.schema_id for r in chain_of({**records, 1: record(1, 0)}, 2, "op").chain()] == \
        [2, 1, 0]
    with pytest.raises(SchemaRecordError, match="schema id 0 is its own ancestor"):
        chain_of({0: record(0, 1), 1: record(1, 0)}, 0, "op")


def test_entries_written_before_schema_ids_read_through_id_0(
        storage: ChangelogService) -> None:
    put(storage, record_path("op", 0), encode_record(record(0)))
    put(storage, record_path("op", 1), encode_record(record(1, 0)))
    history = history_at(storage, "op", committed(None))
    assert history is not None and history.current == 0
    named = history_at(storage, "op", committed(1))
    assert named is not None and [r.schema_id for r in named.chain()] == [1, 0]


def test_inspect_reports_a_damaged_record_as_a_problem_and_shows_the_others(
        storage: ChangelogService) -> None:
    put(storage, record_path("op", 0), encode_record(record(0)))
    put(storage, record_path("op", 1), b"{}")
    problems: list[str] = []
    report = describe_schema_records(storage, committed(0), problems)
    assert problems == ["state schema record 'schemas/op/1.json' lacks magic "
                        "'DSTL-STATE-SCHEMA'"]
    assert report["op"]["chain"] == [0]
    assert report["op"]["records"][0]["variables"] == {
        "count": "value state, value <count bigint>",
        "items": "map state, key <item string>, value <count bigint>, with TTL"}


def test_verify_reports_a_record_missing_from_the_committed_chain(
        storage: ChangelogService) -> None:
    put(storage, record_path("op", 1), encode_record(record(1, 0)))
    assert schema_record_problems(storage, committed(1)) == [
        "state schema record 'schemas/op/0.json' is missing, but the committed state refers "
        "to it (through schema id 1); restore the file from a backup"]
    assert schema_record_problems(storage, None) == []
