"""State schema evolution of PySpark processors: a release changes its state schemas and the
next start reads what the previous release wrote, or is refused before any batch.

Each allowed change is written by one release and read after a restart by the next (value,
list and map state, Row and pandas processors); each refusal is read from its message; the
checkpoint written before schema ids existed, a crash between a schema record and the first
commit on it, the state reader over two schema ids, `inspect`, and a side by side with
PySpark's own operator (encodingFormat=avro) complete it. The rules themselves are checked
without Spark in tests/spark/codec/test_schema_rules.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pyspark_dstl import StateSchemaError, read_state, stateful
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.lineage.schema_records import SchemaRecord, read_records
from pyspark_dstl.backend.ops.inspection import format_inspection, inspect_checkpoint
from pyspark_dstl.changelog.changelog_service import ChangelogService
from tests.support.compat_runs import input_stream, keeping_sink, run_to_end, write_inputs
from tests.support.evolution_processors import INPUT, OUTPUT, StateProbe, release
from tests.support.tws_compare import (
    ENGINES,
    PYSPARK_STATE_SETTINGS,
    Run,
    Workspace,
    assert_same_batches,
    await_query,
    session_conf,
    write_input,
)
from tests.support.tws_scenarios import Scenario

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

ROWS_AS = ["rows", "pandas"]
Seen = dict[int, dict[str, Any]]


def with_extra(v: int) -> tuple[Any, Any, Any]:
    """What a release whose value has a third field writes."""
    return (v, f"name-{v}", None), (v,), (v,)


def frame(**sums: int) -> pd.DataFrame:
    return pd.DataFrame({"user": list(sums), "v": pd.array(list(sums.values()), dtype="int64")})


def stream_of(spark: Any, root: Path, processor: StateProbe, rows_as: str,
              time_mode: str = "None", cast_user: str | None = None) -> Any:
    df = input_stream(spark, root / "in", INPUT)
    if cast_user is not None:
        df = df.withColumn("user", df["user"].cast(cast_user))
    grouped = stateful(df).group_by("user")
    method = (grouped.transformWithState if rows_as == "rows"
              else grouped.transformWithStateInPandas)
    return method(processor, OUTPUT, "Update", time_mode, checkpoint_location=str(root / "ckpt"))


def seen_by_batch(outputs: dict[int, list[dict[str, Any]]]) -> Seen:
    return {batch: {row["user"]: json.loads(row["seen"]) for row in rows}
            for batch, rows in outputs.items()}


def run_release(spark: Any, root: Path, processor: StateProbe, rows_as: str = "rows",
                time_mode: str = "None", legacy: bool = False) -> Seen:
    """Run a release on the checkpoint until its input is read. `legacy`: as the library
    did before schema ids (no record, values without an id, entries naming none)."""
    stream = stream_of(spark, root, processor, rows_as, time_mode)
    if legacy:
        stream.operator.spec.processor.declarations = None
    return seen_by_batch(run_to_end(stream, {}))


def storage_of(root: Path) -> ChangelogService:
    return ChangelogService((root / "ckpt").as_uri())


def records_of(root: Path) -> dict[int, SchemaRecord]:
    with storage_of(root) as storage:
        return read_records(storage, "stateful")


def batch_schema_ids(root: Path) -> dict[int, Any]:
    with storage_of(root) as storage:
        log = CommitLog(storage)
        return {b: log.read(b).extra.get("state_schemas") for b in log.batch_ids()}


def state_of(spark: Any, root: Path, batch_id: int, variable: str) -> dict[str, Any]:
    frame_ = read_state(spark, str(root / "ckpt"), batch_id).toPandas()
    rows = frame_[frame_["state_variable"] == variable]
    return {json.loads(r.key)[0]: (json.loads(r.value), None if pd.isna(r.schema_id)
                                   else int(r.schema_id), r.value_schema)
            for r in rows.itertuples()}


# ---- allowed changes: written by one release, read after a restart by the next --------------


@pytest.mark.parametrize("rows_as", ROWS_AS)
def test_fields_added_removed_and_reordered_are_matched_by_name(spark: Any, tmp_path: Path,
                                                                rows_as: str) -> None:
    first = release("Fields1", rows_as, VALUE="id int, name string, dropped string",
                    ENTRY="n int, tag string", MAP_VALUE="count int, note string",
                    make=lambda v: ((v, f"name-{v}", "gone"), (v, "t"), (v, "note")))
    second = release("Fields2", rows_as, VALUE="name string, id int, extra bigint",
                     ENTRY="tag string, n int, more string",
                     MAP_VALUE="note string, count int, flag boolean",
                     make=lambda v: ((f"name-{v}", v, 7), ("t", v, "m"), ("note", v, True)))
    write_inputs(tmp_path / "in", [frame(a=1)])
    run_release(spark, tmp_path, first, rows_as)
    write_inputs(tmp_path / "in", [frame(a=10)], start=1)
    seen = run_release(spark, tmp_path, second, rows_as)
    assert seen[1]["a"] == {"value": ["name-1", 1, None], "items": [["t", 1, None]],
                            "map": [[["k1"], ["note", 1, None]]]}


@pytest.mark.parametrize("rows_as", ROWS_AS)
def test_widened_numbers_and_nullable_fields_read_the_old_values_exactly(
        spark: Any, tmp_path: Path, rows_as: str) -> None:
    first = release("Widen1", rows_as,
                    VALUE="b tinyint, s smallint, i int, f float, d int, p decimal(5,2), "
                          "x int not null",
                    ENTRY="n int", MAP_VALUE="amount decimal(5,2)",
                    make=lambda v: ((1, 2, 3, 1.5, 4, Decimal("1.23"), 7), (v,),
                                    (Decimal("2.50"),)))
    second = release("Widen2", rows_as,
                     VALUE="b smallint, s int, i bigint, f double, d decimal(12,2), "
                           "p decimal(8,3), x int",
                     ENTRY="n bigint", MAP_VALUE="amount decimal(7,2)",
                     make=lambda v: ((1, 2, 3, 1.5, 4, Decimal("1.23"), None), (v,),
                                     (Decimal("2.50"),)))
    write_inputs(tmp_path / "in", [frame(a=1)])
    run_release(spark, tmp_path, first, rows_as)
    write_inputs(tmp_path / "in", [frame(a=10)], start=1)
    seen = run_release(spark, tmp_path, second, rows_as)
    assert seen[1]["a"] == {"value": [1, 2, 3, 1.5, "4.00", "1.230", 7], "items": [[1]],
                            "map": [[["k1"], ["2.50"]]]}


@pytest.mark.parametrize("rows_as", ROWS_AS)
def test_nested_structs_evolve_by_the_same_rules(spark: Any, tmp_path: Path,
                                                 rows_as: str) -> None:
    first = release("Nested1", rows_as,
                    VALUE="inner struct<a: int, b: string>, tags array<struct<k: string>>, "
                          "m map<string, struct<c: int>>",
                    make=lambda v: (((v, "bee"), [("x",)], {"q": (v,)}), (v,), (v,)))
    second = release("Nested2", rows_as,
                     VALUE="inner struct<b: string, a: bigint, c: string>, "
                           "tags array<struct<k: string, w: int>>, "
                           "m map<string, struct<c: bigint, d: string>>",
                     make=lambda v: ((("bee", v, "c"), [("x", 1)], {"q": (v, "d")}), (v,),
                                     (v,)))
    write_inputs(tmp_path / "in", [frame(a=1)])
    run_release(spark, tmp_path, first, rows_as)
    write_inputs(tmp_path / "in", [frame(a=10)], start=1)
    seen = run_release(spark, tmp_path, second, rows_as)
    assert seen[1]["a"]["value"] == [{"b": "bee", "a": 1, "c": None},
                                     [{"k": "x", "w": None}], {"q": {"c": 1, "d": None}}]


def test_each_change_records_one_schema_id_and_each_commit_names_the_id_it_wrote_with(
        spark: Any, tmp_path: Path) -> None:
    first = release("Ids1", "rows")
    second = release("Ids2", "rows", VALUE="id bigint, name string")
    write_inputs(tmp_path / "in", [frame(a=1)])
    run_release(spark, tmp_path, first)
    write_inputs(tmp_path / "in", [frame(a=2)], start=1)
    run_release(spark, tmp_path, first)  # the same release again: no new record
    write_inputs(tmp_path / "in", [frame(a=3)], start=2)
    run_release(spark, tmp_path, second)
    records = records_of(tmp_path)
    assert sorted(records) == [0, 1] and (records[0].base, records[1].base) == (None, 0)
    assert batch_schema_ids(tmp_path) == {0: {"stateful": 0}, 1: {"stateful": 0},
                                          2: {"stateful": 1}}


# ---- refused changes: at start, on the driver, before any batch -------------------------------


BASE = {"VALUE": "id int, name string", "ENTRY": "n int", "MAP_KEY": "item string",
        "MAP_VALUE": "count int"}


@pytest.fixture(scope="module")
def held(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint one release of the probe (processing time, no TTL) wrote two batches to."""
    root = tmp_path_factory.mktemp("held")
    write_inputs(root / "in", [frame(a=1, b=2), frame(a=3)])
    run_release(spark, root, release("Held", "rows", **BASE), time_mode="ProcessingTime")
    return root


REFUSALS = {
    "narrowed": ({"VALUE": "id smallint, name string"},
                 "state variable 'value' (value state), field 'id': int -> smallint "
                 "[STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION]"),
    "retyped": ({"VALUE": "id string, name string"},
                "state variable 'value' (value state), field 'id': int -> string "
                "[STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION]"),
    "made_non_nullable": ({"VALUE": "id int, name string not null"},
                          "state variable 'value' (value state), field 'name': string "
                          "(nullable) -> string (not nullable) "
                          "[STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION]"),
    "added_non_nullable": ({"VALUE": "id int, name string, n int not null"},
                           "state variable 'value' (value state), field 'n': (absent) -> int "
                           "[STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION]"),
    "list_field_narrowed": ({"ENTRY": "n tinyint"},
                            "state variable 'items' (list state), field 'n': int -> tinyint "
                            "[STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION]"),
    "kind_changed": ({"KIND": "list"},
                     "state variable 'value': declared as list state, held as value state "
                     "[STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE]"),
    "ttl_added": ({"VALUE_TTL_MS": 60_000},
                  "state variable 'value' (value state): declared with a TTL, held without one "
                  "[STATE_STORE_INVALID_CONFIG_AFTER_RESTART]"),
    "map_key_changed": ({"MAP_KEY": "item string, size int"},
                        "state variable 'by_item' (map state), map key: (item string) held, "
                        "(item string, size int) declared [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE]"),
}


def refusal_of(spark: Any, root: Path, processor: StateProbe,
               cast_user: str | None = None) -> str:
    with storage_of(root) as storage:
        before = (CommitLog(storage).batch_ids(), sorted(read_records(storage, "stateful")))
    stream = stream_of(spark, root, processor, "rows", "ProcessingTime", cast_user)
    with pytest.raises(StateSchemaError) as refused:
        stream.foreach_batch(keeping_sink({})).start(trigger={"availableNow": True})
    with storage_of(root) as storage:
        after = (CommitLog(storage).batch_ids(), sorted(read_records(storage, "stateful")))
    assert after == before, "a refused start wrote to the checkpoint"
    assert not spark.streams.active
    return str(refused.value)


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_an_incompatible_change_is_refused_at_start_naming_variable_field_and_types(
        spark: Any, held: Path, case: str) -> None:
    change, first_line = REFUSALS[case]
    message = refusal_of(spark, held, release(f"Refused_{case}", "rows", **{**BASE, **change}))
    assert message.splitlines()[0].startswith(first_line)
    assert "start a new checkpoint" in message or "another name" in message or \
        "again" in message


def test_a_changed_grouping_key_type_is_refused_at_start(spark: Any, held: Path) -> None:
    message = refusal_of(spark, held, release("KeyCast", "rows", **BASE), cast_user="binary")
    assert message.startswith("grouping key: (user string) in the checkpoint, (user binary) "
                              "now [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE]")


def test_a_refused_narrowing_names_what_to_do_and_the_release_that_held_it_still_runs(
        spark: Any, held: Path) -> None:
    message = refusal_of(spark, held, release("Narrow", "rows", **{
        **BASE, "VALUE": "id tinyint, name string"}))
    assert "keep int or wider" in message and "schema id 0" in message
    write_inputs(held / "in", [frame(b=5)], start=10)
    seen = run_release(spark, held, release("HeldAgain", "rows", **BASE),
                       time_mode="ProcessingTime")
    assert seen[max(seen)]["b"]["value"] == [2, "name-2"]


def test_the_drop_in_path_refuses_when_the_query_starts(dropin: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", [frame(a=1)])
    run_release(dropin, tmp_path, release("Drop1", "rows"))
    df = input_stream(dropin, tmp_path / "in", INPUT)
    narrowed = release("Drop2", "rows", VALUE="id tinyint, name string")
    query = (df.groupBy("user").transformWithState(narrowed, OUTPUT, "Update", "None")
             .writeStream.option("checkpointLocation", str(tmp_path / "ckpt"))
             .foreachBatch(keeping_sink({})))
    with pytest.raises(StateSchemaError, match=r"^state variable 'value' \(value state\), "
                                               r"field 'id': int -> tinyint "
                                               r"\[STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION\]"):
        query.start()


# ---- checkpoints written before schema ids ---------------------------------------------------


def test_a_checkpoint_without_schema_ids_records_id_0_at_its_first_start_and_evolves(
        spark: Any, tmp_path: Path) -> None:
    first = release("Legacy1", "rows")
    write_inputs(tmp_path / "in", [frame(a=1, b=2)])
    run_release(spark, tmp_path, first, legacy=True)
    assert records_of(tmp_path) == {} and batch_schema_ids(tmp_path) == {0: None}
    assert state_of(spark, tmp_path, 0, "value")["b"] == ([2, "name-2"], None, None)

    write_inputs(tmp_path / "in", [frame(a=10)], start=1)
    seen = run_release(spark, tmp_path, first)  # the same release, on this library
    assert seen[1]["a"]["value"] == [1, "name-1"]
    records = records_of(tmp_path)
    assert sorted(records) == [0] and records[0].base is None
    assert batch_schema_ids(tmp_path)[1] == {"stateful": 0}

    write_inputs(tmp_path / "in", [frame(b=5)], start=2)
    seen = run_release(spark, tmp_path, release(
        "Legacy2", "rows", VALUE="name string, id bigint, extra string",
        make=lambda v: ((f"name-{v}", v, None), (v,), (v,))))
    assert seen[2]["b"] == {"value": ["name-2", 2, None], "items": [[2]],
                            "map": [[["k2"], [2]]]}
    assert sorted(records_of(tmp_path)) == [0, 1]


# ---- a crash between a schema record and the first commit on it -----------------------------


CHILD = """
import json, sys
from pyspark_dstl.backend.lineage.schema_records import SchemaRecord
from pyspark_dstl.spark.driver.state_schemas import settle
from pyspark_dstl.changelog.changelog_service import ChangelogService
declared = SchemaRecord.from_dict(json.loads(sys.argv[2])).declarations
with ChangelogService(sys.argv[1]) as storage:
    settle(storage, "stateful", declared)
print("not killed")
"""


def declarations_of(spark: Any, root: Path, processor: StateProbe) -> dict[str, Any]:
    declared = stream_of(spark, root, processor, "rows").operator.spec.processor.declarations
    return SchemaRecord(0, None, declared).to_dict()


def test_a_kill_right_after_a_schema_record_leaves_the_committed_chain_exact(
        spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", [frame(a=1)])
    run_release(spark, tmp_path, release("Crash1", "rows"))
    recorded = release("Crash2", "rows", VALUE="id int, name string, extra bigint",
                       make=with_extra)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, (tmp_path / "ckpt").as_uri(),
         json.dumps(declarations_of(spark, tmp_path, recorded))],
        env={**os.environ, "DSTL_KILL_POINT": "schema_record_after:1"},
        capture_output=True, text=True, timeout=120)
    assert child.returncode == -9, child.stderr
    assert sorted(records_of(tmp_path)) == [0, 1]
    assert batch_schema_ids(tmp_path) == {0: {"stateful": 0}}  # nothing committed on id 1
    # a release whose "extra" could not read id 1's values: id 1 is not in the chain
    write_inputs(tmp_path / "in", [frame(a=10)], start=1)
    seen = run_release(spark, tmp_path, release("Crash3", "rows", make=with_extra,
                                                VALUE="id int, name string, extra string"))
    assert seen[1]["a"]["value"] == [1, "name-1", None]
    records = records_of(tmp_path)
    assert sorted(records) == [0, 1, 2] and records[2].base == 0
    assert batch_schema_ids(tmp_path)[1] == {"stateful": 2}


def test_a_batch_that_wrote_values_with_a_new_id_but_never_committed_leaves_no_trace(
        spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", [frame(a=1)])
    run_release(spark, tmp_path, release("Fail1", "rows"))
    write_inputs(tmp_path / "in", [frame(a=10)], start=1)

    def failing_sink(df: Any, batch_id: int) -> None:
        raise RuntimeError("the sink fails after the stores committed")

    stream = stream_of(spark, tmp_path, release("Fail2", "rows", make=with_extra,
                                                VALUE="id int, name string, extra bigint"),
                       "rows")
    query = stream.foreach_batch(failing_sink).start(trigger={"availableNow": True})
    with pytest.raises(Exception, match="the sink fails"):
        query.awaitTermination()
    assert batch_schema_ids(tmp_path) == {0: {"stateful": 0}}
    seen = run_release(spark, tmp_path, release("Fail3", "rows", make=with_extra,
                                                VALUE="id int, name string, extra string"))
    assert seen[1]["a"] == {"value": [1, "name-1", None], "items": [[1]],
                            "map": [[["k1"], [1]]]}
    assert batch_schema_ids(tmp_path)[1] == {"stateful": 2}


# ---- reading the state: the state reader and inspect ------------------------------------------


def test_the_state_reader_shows_each_batch_in_its_own_schema_with_the_writer_id(
        spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", [frame(a=1, b=2)])
    run_release(spark, tmp_path, release("Read1", "rows"))
    write_inputs(tmp_path / "in", [frame(a=10)], start=1)
    run_release(spark, tmp_path, release("Read2", "rows",
                                         VALUE="name string, id bigint, extra string",
                                         make=lambda v: ((f"name-{v}", v, "x"), (v,), (v,))))
    before = state_of(spark, tmp_path, 0, "value")
    after = state_of(spark, tmp_path, 1, "value")
    assert {k: v[:2] for k, v in before.items()} == {"a": ([1, "name-1"], 0),
                                                     "b": ([2, "name-2"], 0)}
    assert {k: v[:2] for k, v in after.items()} == {"a": (["name-10", 10, "x"], 1),
                                                    "b": (["name-2", 2, None], 0)}
    shown = json.loads(after["b"][2])
    assert [f["name"] for f in shown["fields"]] == ["name", "id", "extra"]
    assert state_of(spark, tmp_path, 1, "items")["a"][:2] == ([[1], [10]], 1)


def test_inspect_shows_each_variables_schema_history(spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", [frame(a=1)])
    run_release(spark, tmp_path, release("Show1", "rows"))
    write_inputs(tmp_path / "in", [frame(a=2)], start=1)
    run_release(spark, tmp_path, release("Show2", "rows", VALUE="id bigint, name string"))
    with storage_of(tmp_path) as storage:
        report = inspect_checkpoint(storage)
    schemas = report["state_schemas"]["stateful"]
    assert (schemas["committed"], schemas["chain"]) == (1, [1, 0])
    assert [r["variables"]["value"] for r in schemas["records"]] == [
        "value state, value <id int, name string>", "value state, value <id bigint, name string>"]
    text = format_inspection(report)
    assert "state schemas of operator stateful: committed id 1, read through 1 -> 0" in text
    assert "    by_item: map state, key <item string>, value <count int>" in text


# ---- side by side with PySpark's own operator (encodingFormat=avro) ---------------------------


AVRO = {**PYSPARK_STATE_SETTINGS, "spark.sql.streaming.stateStore.encodingFormat": "avro"}


def test_an_evolving_value_state_gives_pyspark_avro_outputs_batch_by_batch(
        spark: Any, tmp_path: Path) -> None:
    first = release("Avro1", "rows", ONLY_VALUE=True, OUTPUT=OUTPUT)
    second = release("Avro2", "rows", ONLY_VALUE=True, OUTPUT=OUTPUT,
                     VALUE="name string, id bigint, score double",
                     make=lambda v: ((f"name-{v}", v, v / 4), None, None))
    batches = (frame(a=1, b=2), frame(a=10, c=3), frame(b=4, c=5))
    scenario = Scenario("evolution", type(first), INPUT, batches, row_api=True)
    phases = [([0], first), ([1], second), ([2], second)]
    workspace = Workspace(tmp_path)
    runs = {}
    for name in ("pyspark", "dstl"):
        engine, run = ENGINES[name], Run(name)
        settings = AVRO if name == "pyspark" else {}
        with session_conf(spark, {"spark.sql.shuffle.partitions": "2", **settings}):
            for files, processor in phases:
                for index in files:
                    write_input(workspace.root / f"in-{name}", index, batches[index])
                run.runs.append([])
                query = engine.start(input_stream(spark, workspace.root / f"in-{name}", INPUT),
                                     scenario, processor, workspace.checkpoint(name),
                                     run.sink, {"availableNow": True})
                await_query(query)
        runs[name] = run
    assert_same_batches(runs["pyspark"], runs["dstl"])
    # older values read in the newer schema, on both engines
    assert json.loads(dict(runs["dstl"].batches[1])["a"]) == {"value": ["name-1", 1, None]}
    assert json.loads(dict(runs["dstl"].batches[2])["b"]) == {"value": ["name-2", 2, None]}
    assert json.loads(dict(runs["dstl"].batches[2])["c"]) == {"value": ["name-3", 3, 0.75]}
