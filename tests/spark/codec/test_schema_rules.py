"""State schema evolution without Spark: which changes keep stored values readable, how an old
value reads under a new schema, the schema id every value carries, the record files, and what
a start decides from the records and the commit log (spark/codec/evolution.py,
codec/schema_history.py, driver/state_schemas.py; the record format itself:
tests/backend/test_schema_records.py)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgpack
import pytest
from pyspark.sql import types as T

from pyspark_dstl.backend.backend_errors import SchemaRecordError
from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.fencing.lease import acquire
from pyspark_dstl.backend.lineage.commit_entry import CommitEntry
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.lineage.schema_records import (
    Declarations,
    SchemaHistory,
    SchemaRecord,
    StateDeclaration,
    encode_record,
    read_records,
)
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.spark.codec.evolution import (
    VersionedRowCodec,
    stored_projector,
    value_change_problems,
)
from pyspark_dstl.spark.codec.schema_history import canonical_schema, value_schemas
from pyspark_dstl.spark.codec.typed_values import RowCodec
from pyspark_dstl.spark.codec.values import (
    decode_value,
    encode_elements,
    encode_value,
    iter_elements,
)
from pyspark_dstl.spark.driver.state_schemas import settle
from pyspark_dstl.spark.spark_errors import StateDecodingError, StateSchemaError


def struct(*fields: tuple[str, Any] | tuple[str, Any, bool]) -> T.StructType:
    return T.StructType([T.StructField(f[0], f[1], f[2] if len(f) > 2 else True)
                         for f in fields])


INT, LONG, STRING = T.IntegerType(), T.LongType(), T.StringType()

ALLOWED = {
    "add": (struct(("a", INT)), struct(("a", INT), ("b", STRING))),
    "remove": (struct(("a", INT), ("b", STRING)), struct(("a", INT))),
    "reorder": (struct(("a", INT), ("b", STRING)), struct(("b", STRING), ("a", INT))),
    "byte_short": (struct(("a", T.ByteType())), struct(("a", T.ShortType()))),
    "short_int": (struct(("a", T.ShortType())), struct(("a", INT))),
    "int_long": (struct(("a", INT)), struct(("a", LONG))),
    "byte_long": (struct(("a", T.ByteType())), struct(("a", LONG))),
    "float_double": (struct(("a", T.FloatType())), struct(("a", T.DoubleType()))),
    "int_decimal": (struct(("a", INT)), struct(("a", T.DecimalType(12, 2)))),
    "long_decimal": (struct(("a", LONG)), struct(("a", T.DecimalType(19, 0)))),
    "decimal_precision_up": (struct(("a", T.DecimalType(5, 2))),
                             struct(("a", T.DecimalType(7, 2)))),
    "decimal_scale_up": (struct(("a", T.DecimalType(5, 2))),
                         struct(("a", T.DecimalType(8, 3)))),
    "more_nullable": (struct(("a", INT, False)), struct(("a", INT, True))),
    "nested_add": (struct(("s", struct(("x", INT)))),
                   struct(("s", struct(("x", LONG), ("y", STRING))))),
    "array_elements": (struct(("l", T.ArrayType(struct(("x", INT))))),
                       struct(("l", T.ArrayType(struct(("x", LONG), ("y", STRING)))))),
    "map_values": (struct(("m", T.MapType(STRING, INT))),
                   struct(("m", T.MapType(STRING, LONG)))),
}

REFUSED = {
    "int_short": (struct(("a", INT)), struct(("a", T.ShortType())), "a", "narrowing"),
    "long_int": (struct(("a", LONG)), struct(("a", INT)), "a", "narrowing"),
    "double_float": (struct(("a", T.DoubleType())), struct(("a", T.FloatType())), "a",
                     "not a widening"),
    "int_double": (struct(("a", INT)), struct(("a", T.DoubleType())), "a", "not a widening"),
    "int_string": (struct(("a", INT)), struct(("a", STRING)), "a", "incompatible"),
    "string_binary": (struct(("a", STRING)), struct(("a", T.BinaryType())), "a",
                      "incompatible"),
    "long_small_decimal": (struct(("a", LONG)), struct(("a", T.DecimalType(18, 0))), "a",
                           "narrowing"),
    "decimal_scale_down": (struct(("a", T.DecimalType(8, 3))),
                           struct(("a", T.DecimalType(8, 2))), "a", "narrowing"),
    "less_nullable": (struct(("a", INT, True)), struct(("a", INT, False)), "a",
                      "non-nullable"),
    "added_non_nullable": (struct(("a", INT)), struct(("a", INT), ("b", INT, False)), "b",
                           "added as non-nullable"),
    "nested_narrowing": (struct(("s", struct(("x", LONG)))), struct(("s", struct(("x", INT)))),
                         "s.x", "narrowing"),
    "array_element": (struct(("l", T.ArrayType(LONG))), struct(("l", T.ArrayType(INT))),
                      "l[]", "narrowing"),
    "map_key": (struct(("m", T.MapType(INT, STRING))), struct(("m", T.MapType(LONG, STRING))),
                "m{key}", "map keys cannot change"),
    "struct_to_string": (struct(("s", struct(("x", INT)))), struct(("s", STRING)), "s",
                         "incompatible"),
}


@pytest.mark.parametrize("case", sorted(ALLOWED))
def test_an_allowed_change_has_no_problem(case: str) -> None:
    old, new = ALLOWED[case]
    assert value_change_problems(old, new) == []


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_refused_change_names_the_field_and_why(case: str) -> None:
    old, new, field, reason = REFUSED[case]
    problems = value_change_problems(old, new)
    assert problems and problems[0].field == field and reason in problems[0].reason


# ---- values read under a later schema -------------------------------------------------------


def written_then_read(old: T.StructType, new: T.StructType, value: Any) -> tuple[Any, ...]:
    """A value written with schema id 0 under `old`, read by the codec of id 1 under `new`."""
    writer = VersionedRowCodec(old, "v", 0, {0: old})
    reader = VersionedRowCodec(new, "v", 1, {0: old, 1: new})
    raw = encode_value(writer.encode(value), None, "v")
    return reader.decode(decode_value(raw, 0, "v")[1])


def test_old_values_read_by_name_with_null_for_added_fields() -> None:
    old, new = ALLOWED["reorder"][0], struct(("b", STRING), ("c", LONG), ("a", INT))
    assert written_then_read(old, new, (1, "x")) == ("x", None, 1)


def test_widened_numbers_read_exactly() -> None:
    old = struct(("i", INT), ("f", T.FloatType()), ("d", INT), ("p", T.DecimalType(5, 2)))
    new = struct(("i", LONG), ("f", T.DoubleType()), ("d", T.DecimalType(12, 2)),
                 ("p", T.DecimalType(8, 3)))
    assert written_then_read(old, new, (3, 1.5, 4, Decimal("1.23"))) == (
        3, 1.5, Decimal("4.00"), Decimal("1.230"))


def test_nested_structs_in_arrays_and_maps_are_projected() -> None:
    old = struct(("l", T.ArrayType(struct(("x", INT)))),
                 ("m", T.MapType(STRING, struct(("x", INT)))))
    new = struct(("m", T.MapType(STRING, struct(("y", STRING), ("x", LONG)))),
                 ("l", T.ArrayType(struct(("x", LONG), ("y", STRING)))))
    m, lst = written_then_read(old, new, ([(1,), None], {"k": (2,)}))
    assert [None if r is None else r.asDict() for r in lst] == [{"x": 1, "y": None}, None]
    assert {k: v.asDict() for k, v in m.items()} == {"k": {"y": None, "x": 2}}


def test_an_unchanged_schema_needs_no_projection() -> None:
    schema = ALLOWED["add"][1]
    assert stored_projector(schema, schema) is None


def test_a_value_carries_its_schema_id_in_extension_type_4() -> None:
    codec = VersionedRowCodec(ALLOWED["add"][0], "v", 5, {5: ALLOWED["add"][0]})
    raw = encode_value(codec.encode((7,)), None, "v")
    assert raw == msgpack.packb(msgpack.ExtType(4, msgpack.packb(5) + msgpack.packb([7])))
    assert len(raw) - len(msgpack.packb([7])) == 4  # what the id costs a value below id 128


def test_a_value_without_an_id_is_schema_id_0() -> None:
    old, new = ALLOWED["add"]
    legacy = encode_value(RowCodec(old, "v").encode((1,)), None, "v")  # as written before ids
    reader = VersionedRowCodec(new, "v", 1, {0: old, 1: new})
    assert reader.decode(decode_value(legacy, 0, "v")[1]) == (1, None)


def test_a_value_of_an_id_outside_the_history_is_refused_by_name() -> None:
    old, new = ALLOWED["add"]
    raw = encode_value(VersionedRowCodec(new, "v", 3, {3: new}).encode((1, "x")), None, "v")
    reader = VersionedRowCodec(new, "v", 1, {0: old, 1: new})
    with pytest.raises(StateDecodingError, match=r"^state v: a stored value has schema id 3"):
        reader.decode(decode_value(raw, 0, "v")[1])


@pytest.mark.parametrize("schema_id", [0, 5, 127, 128, 70_000])
@pytest.mark.parametrize("expiry", [None, 1_700_000_000_000])
def test_a_value_encoded_in_one_step_has_the_bytes_of_the_step_by_step_way(
        schema_id: int, expiry: int | None) -> None:
    schema = ALLOWED["add"][1]
    codec = VersionedRowCodec(schema, "v", schema_id, {schema_id: schema})
    assert codec.encode_bytes((7, "x" * 300), expiry) == \
        encode_value(codec.encode((7, "x" * 300)), expiry, "v")


def test_a_value_of_the_current_id_without_expiry_decodes_in_one_step() -> None:
    old, new = ALLOWED["add"]
    reader = VersionedRowCodec(new, "v", 1, {0: old, 1: new})
    assert reader.decode_bytes(reader.encode_bytes((7, "x"), None)) == (7, "x")


def test_any_other_stored_value_is_left_to_the_step_by_step_way() -> None:
    old, new = ALLOWED["add"]
    reader = VersionedRowCodec(new, "v", 1, {0: old, 1: new})
    expiring = reader.encode_bytes((7, "x"), 1_700_000_000_000)
    older_id = VersionedRowCodec(old, "v", 0, {0: old}).encode_bytes((7,), None)
    before_ids = encode_value(RowCodec(old, "v").encode((7,)), None, "v")
    damaged = reader.encode_bytes((7, "x"), None)[:-1]
    assert [reader.decode_bytes(raw) for raw in (expiring, older_id, before_ids, damaged)] == \
        [None, None, None, None]
    assert reader.decode(decode_value(older_id, 0, "v")[1]) == (7, None)


def test_a_list_rewritten_after_an_expiry_keeps_each_elements_bytes() -> None:
    codec = VersionedRowCodec(ALLOWED["add"][0], "v", 2, {2: ALLOWED["add"][0]})
    data = encode_elements([codec.encode((1,)), codec.encode((2,))], 10_000, "v")
    kept = [encode_value(e.value, e.expires_at_ms, "v") for e in iter_elements(data, "v")]
    assert b"".join(kept) == data


# ---- schema records and what a start decides --------------------------------------------------


def declarations(value: T.StructType, kind: str = "value", ttl: bool = False) -> Declarations:
    return Declarations(canonical_schema(struct(("user", STRING))),
                        {"state": StateDeclaration(kind, canonical_schema(value), None, ttl)})


def commit(storage: ChangelogService, batch_id: int, schema_id: int | None) -> None:
    extra = {} if schema_id is None else {"state_schemas": {"stateful": schema_id}}
    lease = acquire(storage, BackendSettings().fencing)
    try:
        CommitLog(storage).write(batch_id, CommitEntry(batch_id, {}, extra=extra), lease=lease)
    finally:
        lease.release("test")


@pytest.fixture
def storage(tmp_path: Path) -> Any:
    with ChangelogService((tmp_path / "ckpt").as_uri()) as opened:
        yield opened


def test_a_first_start_records_id_0_and_the_same_declarations_record_nothing_more(
        storage: ChangelogService) -> None:
    declared = declarations(ALLOWED["add"][0])
    assert settle(storage, "stateful", declared).current == 0
    commit(storage, 0, 0)
    assert settle(storage, "stateful", declared).current == 0
    assert sorted(read_records(storage, "stateful")) == [0]


def test_a_compatible_change_gets_the_next_id_based_on_the_committed_one(
        storage: ChangelogService) -> None:
    settle(storage, "stateful", declarations(ALLOWED["add"][0]))
    commit(storage, 0, 0)
    history = settle(storage, "stateful", declarations(ALLOWED["add"][1]))
    assert history.current == 1 and [r.schema_id for r in history.chain()] == [1, 0]
    assert value_schemas(history, "state") == {0: ALLOWED["add"][0], 1: ALLOWED["add"][1]}


def test_a_start_is_checked_against_every_id_of_the_chain_not_only_the_newest(
        storage: ChangelogService) -> None:
    first = struct(("a", INT), ("b", STRING))
    settle(storage, "stateful", declarations(first))
    commit(storage, 0, 0)
    settle(storage, "stateful", declarations(struct(("a", INT))))  # b removed
    commit(storage, 1, 1)
    with pytest.raises(StateSchemaError, match=r"field 'b': string -> int .*schema id 0"):
        settle(storage, "stateful", declarations(struct(("a", INT), ("b", INT))))


def test_a_record_no_commit_names_is_skipped_and_its_id_never_reused(
        storage: ChangelogService) -> None:
    settle(storage, "stateful", declarations(struct(("a", INT))))
    commit(storage, 0, 0)
    settle(storage, "stateful", declarations(struct(("a", INT), ("b", LONG))))  # not committed
    history = settle(storage, "stateful", declarations(struct(("a", INT), ("b", STRING))))
    assert history.current == 2 and [r.schema_id for r in history.chain()] == [2, 0]


def test_a_start_that_recorded_and_crashed_reuses_its_record_when_started_again(
        storage: ChangelogService) -> None:
    settle(storage, "stateful", declarations(struct(("a", INT))))
    commit(storage, 0, 0)
    changed = declarations(struct(("a", INT), ("b", LONG)))
    assert settle(storage, "stateful", changed).current == 1
    assert settle(storage, "stateful", changed).current == 1
    assert sorted(read_records(storage, "stateful")) == [0, 1]


def test_entries_written_before_schema_ids_make_the_first_record_id_0(
        storage: ChangelogService) -> None:
    commit(storage, 0, None)
    history = settle(storage, "stateful", declarations(struct(("a", INT))))
    assert history.current == 0 and history.records[0].base is None


def test_a_missing_record_the_commit_names_is_refused(storage: ChangelogService) -> None:
    commit(storage, 0, 4)
    with pytest.raises(SchemaRecordError, match=r"^state schema record "
                                                r"'schemas/stateful/4.json' is missing"):
        settle(storage, "stateful", declarations(struct(("a", INT))))


def test_kind_and_ttl_changes_are_refused_with_sparks_error_class(
        storage: ChangelogService) -> None:
    settle(storage, "stateful", declarations(struct(("a", INT))))
    commit(storage, 0, 0)
    with pytest.raises(StateSchemaError, match=r"STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE"):
        settle(storage, "stateful", declarations(struct(("a", INT)), kind="list"))
    with pytest.raises(StateSchemaError, match=r"STATE_STORE_INVALID_CONFIG_AFTER_RESTART"):
        settle(storage, "stateful", declarations(struct(("a", INT)), ttl=True))
    assert json.loads(encode_record(read_records(storage, "stateful")[0]))["magic"] == \
        "DSTL-STATE-SCHEMA"


def test_verify_reports_a_missing_or_damaged_schema_record(storage: ChangelogService) -> None:
    from pyspark_dstl.backend.ops.verify import verify_checkpoint

    settle(storage, "stateful", declarations(struct(("a", INT))))
    commit(storage, 0, 0)
    settle(storage, "stateful", declarations(struct(("a", LONG))))
    commit(storage, 1, 1)
    assert not [p for p in verify_checkpoint(storage) if "schema" in p]
    storage.loop.run(storage.adelete_many(["schemas/stateful/0.json"]))
    storage.loop.run(storage.aput("schemas/stateful/2.json", b"{}"))
    problems = [p for p in verify_checkpoint(storage) if "schema" in p]
    assert problems == [
        "state schema record 'schemas/stateful/2.json' lacks magic 'DSTL-STATE-SCHEMA'",
        "state schema record 'schemas/stateful/0.json' is missing, but the committed state "
        "refers to it (through schema id 1); restore the file from a backup"]


def test_the_state_reader_shows_a_variable_no_longer_declared_in_its_newest_schema() -> None:
    from pyspark_dstl.spark.readers.state_reader import value_readers

    old, newer = struct(("a", INT)), struct(("a", LONG), ("b", STRING))
    records = {0: SchemaRecord(0, None, declarations(old)),
               1: SchemaRecord(1, 0, declarations(newer)),
               2: SchemaRecord(2, 1, Declarations(declarations(old).grouping_key, {}))}
    read, shown = value_readers(SchemaHistory(2, records))["state"]
    written = VersionedRowCodec(old, "state", 0, {0: old}).encode((5,))
    assert read(decode_value(encode_value(written, None, "state"), 0, "state")[1]) == \
        (0, [5, None])
    assert json.loads(shown) == json.loads(newer.json())
