"""Spark's state data sources read the same on PySpark's checkpoint and on the switch's.

The same query runs on PySpark's own operator (the shared reference runs) and with the switch
installed; then the same `statestore` and `state-metadata` reads, with the switch installed
(a read of PySpark's checkpoint still goes to Spark's source), give equal schemas and rows,
or equal errors (condition and first line, the checkpoint's path taken out).

Two things are compared by rule instead of by value, as noted where they are:
- processing time differs between the two runs, so a TTL expiry and a processing-time timer
  are compared as "written by step i with duration d" (tests/support/state_data.py);
- Spark's change feed shows every write, this backend's each key's last write of a batch
  (docs/state-data.md), and a list's new value as Spark shows ListState.put: where a key is
  written once per batch the feeds are equal; elsewhere this backend's feed equals Spark's
  netted to each key's last write, and both rebuild every batch's state.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.state_data import Read, Windows, metadata_rows, read, run_timed_steps
from tests.support.tws_compare import ReferenceRuns, Workspace, run_phases
from tests.support.tws_processors import LONG_MS, SHORT_MS
from tests.support.tws_scenarios import (
    EVENT_TIMERS,
    INITIAL_STATE,
    LIST_STATE,
    MAP_STATE,
    PROCESSING_TIMERS,
    RUNNING_COUNT,
    TOP_K,
    TTL,
    Scenario,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]

DURATIONS = (SHORT_MS, LONG_MS)
RESTARTS = [[0, 1], [2], [3]]  # three runs of the query on one checkpoint location


@dataclass
class Pair:
    """One scenario run by both engines: their checkpoint locations and step windows."""

    scenario: Scenario
    pyspark: Path
    dropin: Path
    windows: dict[str, Windows] = field(default_factory=dict)

    def checkpoint(self, engine: str) -> Path:
        return self.pyspark if engine == "pyspark" else self.dropin

    def expiry(self, engine: str) -> Any:
        windows = self.windows.get(engine)
        return None if windows is None else (lambda t: windows.label(t, DURATIONS))


class Pairs:
    """Each scenario's two runs, made once per module, on first use."""

    def __init__(self, spark: Any, reference: ReferenceRuns, root: Path) -> None:
        self.spark, self.reference, self.root = spark, reference, root
        self._made: dict[str, Pair] = {}

    def get(self, scenario: Scenario, restarts: bool = False) -> Pair:
        """The pair, run with the switch off whatever the calling test has on: PySpark's run
        must be PySpark's own operator (the DropInEngine installs the switch for its run)."""
        import pyspark_dstl

        name = scenario.name + ("-restarts" if restarts else "")
        if name not in self._made:
            switched = pyspark_dstl.installed()
            if switched:
                pyspark_dstl.uninstall()
            try:
                pair = self._make(scenario, restarts, self.root / name)
            finally:
                if switched:
                    pyspark_dstl.install()
            assert (pair.pyspark / "commits" / "0").is_file()  # Spark's own commit log
            assert (pair.pyspark / "state" / "0").is_dir()  # and Spark's own state store
            assert (pair.dropin / "commits" / "0.0").is_file()  # this backend's
            self._made[name] = pair
        return self._made[name]

    def _make(self, scenario: Scenario, restarts: bool, root: Path) -> Pair:
        shutil.rmtree(root, ignore_errors=True)  # what an earlier, failed attempt left
        workspace = Workspace(root)
        if scenario.pauses is not None:
            windows = run_timed_steps(self.spark, scenario, workspace)
            return Pair(scenario, workspace.checkpoint("pyspark"),
                        workspace.checkpoint("dropin"), windows)
        phases = RESTARTS if restarts else None
        if restarts:
            pyspark = run_phases(self.spark, scenario, "pyspark", workspace, phases)
        else:
            pyspark = self.reference.get(scenario)
        dropin = run_phases(self.spark, scenario, "dropin", workspace, phases)
        assert pyspark.checkpoint is not None and dropin.checkpoint is not None
        return Pair(scenario, pyspark.checkpoint, dropin.checkpoint)


@pytest.fixture(scope="module")
def pairs(spark: Any, reference: ReferenceRuns,
          tmp_path_factory: pytest.TempPathFactory) -> Pairs:
    return Pairs(spark, reference, tmp_path_factory.mktemp("state-data"))


@pytest.fixture
def switched(spark: Any) -> Iterator[Any]:
    """The switch on for the reads (the runs install it themselves)."""
    import pyspark_dstl

    pyspark_dstl.install()
    try:
        yield spark
    finally:
        pyspark_dstl.uninstall()


def both(spark: Any, pair: Pair, source: str = "statestore", **options: Any) -> tuple[Read,
                                                                                   Read]:
    return tuple(read(spark, source, pair.checkpoint(engine), pair.expiry(engine), **options)
                 for engine in ("pyspark", "dropin"))  # type: ignore[return-value]


# --- state reads: every option, every kind of state -------------------------------------------

STATE_READS = [
    (RUNNING_COUNT, False, {"stateVarName": "count"}),
    (RUNNING_COUNT, False, {"stateVarName": "count", "flattenCollectionTypes": "false"}),
    *[(RUNNING_COUNT, False, {"stateVarName": "count", "batchId": b}) for b in range(4)],
    (RUNNING_COUNT, False, {"STATEVARNAME": "  count ", "OPERATORID": 0,
                            "storeName": "default", "batchId": 3}),
    *[(RUNNING_COUNT, False, {"stateVarName": "count", "snapshotStartBatchId": 0,
                              "snapshotPartitionId": p}) for p in range(2)],
    *[(RUNNING_COUNT, True, {"stateVarName": "count", "batchId": b}) for b in range(4)],
    *[(LIST_STATE, False, {"stateVarName": "recent", "batchId": b,
                           "flattenCollectionTypes": flat})
      for b in range(4) for flat in ("true", "false")],
    *[(MAP_STATE, False, {"stateVarName": "items", "batchId": b,
                          "flattenCollectionTypes": flat})
      for b in range(4) for flat in ("true", "false")],
    *[(INITIAL_STATE, False, {"stateVarName": var, "batchId": b})
      for var in ("count", "seeded") for b in range(3)],
    *[(TOP_K, False, {"stateVarName": "top", "flattenCollectionTypes": flat})
      for flat in ("true", "false")],
    *[(EVENT_TIMERS, False, {"stateVarName": var, "batchId": b})
      for var in ("count", "newest") for b in range(5)],
    *[(EVENT_TIMERS, False, {"readRegisteredTimers": "true", "batchId": b}) for b in range(5)],
    *[(TTL, False, {"stateVarName": var, "batchId": b, "flattenCollectionTypes": flat})
      for var in ("brief", "lasting", "history", "tags") for b in range(3)
      for flat in ("true", "false")],
    *[(PROCESSING_TIMERS, False, {"stateVarName": "count", "batchId": b}) for b in range(3)],
    *[(PROCESSING_TIMERS, False, {"readRegisteredTimers": "true", "batchId": b})
      for b in range(3)],
]


def _id(case: Any) -> str:
    scenario, restarts, options = case
    shown = ",".join(f"{k}={v}" for k, v in options.items())
    return f"{scenario.name}{'-restarts' if restarts else ''}[{shown}]"


@pytest.mark.parametrize("case", STATE_READS, ids=_id)
def test_a_state_read_gives_pysparks_schema_and_rows(
        switched: Any, pairs: Pairs, case: tuple[Scenario, bool, dict[str, Any]]) -> None:
    scenario, restarts, options = case
    pyspark, dropin = both(switched, pairs.get(scenario, restarts), **options)
    assert pyspark.error is None, pyspark.error
    assert dropin == pyspark


@pytest.mark.parametrize("scenario", [RUNNING_COUNT, LIST_STATE, MAP_STATE, INITIAL_STATE,
                                      TOP_K, EVENT_TIMERS, TTL, PROCESSING_TIMERS],
                         ids=lambda s: s.name)
def test_state_metadata_gives_pysparks_rows_at_every_batch(
        switched: Any, pairs: Pairs, scenario: Scenario) -> None:
    pair = pairs.get(scenario)
    newest = len(scenario.batches) + (1 if scenario is EVENT_TIMERS else 0)
    for options in [{}, *[{"batchId": b} for b in range(newest)]]:
        rows = [read(switched, "state-metadata", pair.checkpoint(engine), **options)
                for engine in ("pyspark", "dropin")]
        assert rows[1] == rows[0], options


# --- the change feed ------------------------------------------------------------------------

def change_rows(spark: Any, checkpoint: Path, **options: Any) -> list[dict[str, Any]]:
    """Rows in the order the source gives them (Spark: a key's writes in write order)."""
    from tests.support.state_data import plain

    reader = spark.read.format("statestore").option("readChangeFeed", "true")
    for key, value in options.items():
        reader = reader.option(key, value)
    return [plain(row) for row in reader.load(str(checkpoint)).collect()]


def netted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Spark's rows with each key's writes of a batch netted to its last."""
    last: dict[str, dict[str, Any]] = {}
    for row in rows:
        last[json.dumps([row["batch_id"], row["key"], row.get("user_map_key")])] = row
    return sorted(last.values(), key=json.dumps)


@pytest.mark.parametrize(("scenario", "variable"), [
    (RUNNING_COUNT, "count"), (EVENT_TIMERS, "count"), (EVENT_TIMERS, "newest"),
    (PROCESSING_TIMERS, "count")], ids=lambda v: v if isinstance(v, str) else v.name)
def test_the_change_feed_of_a_key_written_once_per_batch_equals_pysparks(
        switched: Any, pairs: Pairs, scenario: Scenario, variable: str) -> None:
    pair = pairs.get(scenario)
    for start, end in ((0, None), (1, 2), (2, 2)):
        options = {"stateVarName": variable, "changeStartBatchId": start,
                   **({} if end is None else {"changeEndBatchId": end})}
        pyspark, dropin = (sorted(change_rows(switched, pair.checkpoint(engine), **options),
                                  key=json.dumps) for engine in ("pyspark", "dropin"))
        assert pyspark and dropin == pyspark, options


@pytest.mark.parametrize(("scenario", "variable"), [
    (MAP_STATE, "items"), (INITIAL_STATE, "count"), (INITIAL_STATE, "seeded")],
    ids=lambda v: v if isinstance(v, str) else v.name)
def test_the_change_feed_is_pysparks_with_each_keys_writes_of_a_batch_netted(
        switched: Any, pairs: Pairs, scenario: Scenario, variable: str) -> None:
    pair = pairs.get(scenario)
    options = {"stateVarName": variable, "changeStartBatchId": 0}
    pyspark = change_rows(switched, pair.pyspark, **options)
    dropin = sorted(change_rows(switched, pair.dropin, **options), key=json.dumps)
    assert dropin == netted(pyspark)


def lists_after(rows: list[dict[str, Any]], batches: int) -> list[dict[str, list[Any]]]:
    """Every batch's lists rebuilt from a list state's change feed, as its rows say: update
    starts the list anew, append adds, delete empties."""
    state: dict[str, list[Any]] = {}
    after = []
    ordered = sorted(rows, key=lambda r: r["batch_id"])  # stable: write order kept
    for batch in range(batches):
        for row in (r for r in ordered if r["batch_id"] == batch):
            key = json.dumps(row["key"])
            if row["change_type"] == "update":
                state[key] = [row["list_element"]]
            elif row["change_type"] == "append":
                state.setdefault(key, []).append(row["list_element"])
            else:
                state.pop(key, None)
        after.append({key: sorted(values, key=json.dumps) for key, values in state.items()})
    return after


def test_list_change_feeds_rebuild_the_same_lists_at_every_batch(switched: Any,
                                                                 pairs: Pairs) -> None:
    pair = pairs.get(LIST_STATE)
    options = {"stateVarName": "recent", "changeStartBatchId": 0}
    pyspark = change_rows(switched, pair.pyspark, **options)
    dropin = change_rows(switched, pair.dropin, **options)
    assert lists_after(dropin, 4) == lists_after(pyspark, 4)
    # the documented difference: a list write shows as the whole new list
    assert {r["change_type"] for r in dropin} <= {"update", "append", "delete"}
    firsts = [r for r in dropin if r["change_type"] == "update"]
    assert len(firsts) == len({(r["batch_id"], json.dumps(r["key"])) for r in firsts})


def test_a_ttl_variable_that_never_expires_has_pysparks_change_feed(switched: Any,
                                                                     pairs: Pairs) -> None:
    pair = pairs.get(TTL)
    rows = []
    for engine in ("pyspark", "dropin"):
        expiry = pair.expiry(engine)
        from tests.support.state_data import plain

        df = (switched.read.format("statestore").option("readChangeFeed", "true")
              .option("stateVarName", "lasting").option("changeStartBatchId", 0)
              .load(str(pair.checkpoint(engine))))
        rows.append(sorted((plain(r, expiry) for r in df.collect()), key=json.dumps))
    assert rows[0] and rows[1] == rows[0]
    assert all(r["value"]["ttlExpirationMs"][0] == "step" for r in rows[1])


# --- errors -----------------------------------------------------------------------------------

ERRORS = [
    (RUNNING_COUNT, {}),
    (RUNNING_COUNT, {"stateVarName": "nope"}),
    (RUNNING_COUNT, {"stateVarName": ""}),
    (RUNNING_COUNT, {"stateVarName": "count", "batchId": 8}),
    (RUNNING_COUNT, {"stateVarName": "count", "batchId": -1}),
    (RUNNING_COUNT, {"stateVarName": "count", "operatorId": -1}),
    (RUNNING_COUNT, {"stateVarName": "count", "storeName": ""}),
    (RUNNING_COUNT, {"stateVarName": "count", "storeName": "other"}),
    (RUNNING_COUNT, {"stateVarName": "count", "readRegisteredTimers": "true"}),
    (RUNNING_COUNT, {"readRegisteredTimers": "true"}),
    (RUNNING_COUNT, {"readRegisteredTimers": "maybe"}),
    (RUNNING_COUNT, {"stateVarName": "count", "joinSide": "middle"}),
    (RUNNING_COUNT, {"stateVarName": "count", "readChangeFeed": "true"}),
    (RUNNING_COUNT, {"stateVarName": "count", "readChangeFeed": "true",
                     "changeStartBatchId": 2, "changeEndBatchId": 1}),
    (RUNNING_COUNT, {"stateVarName": "count", "readChangeFeed": "true",
                     "changeStartBatchId": 8}),
    (RUNNING_COUNT, {"stateVarName": "count", "readChangeFeed": "true",
                     "changeStartBatchId": 0, "changeEndBatchId": 9}),
    (RUNNING_COUNT, {"stateVarName": "count", "changeEndBatchId": 1}),
    (RUNNING_COUNT, {"stateVarName": "count", "snapshotPartitionId": 0}),
    (RUNNING_COUNT, {"stateVarName": "count", "snapshotStartBatchId": 3,
                     "snapshotPartitionId": 0, "batchId": 1}),
    (RUNNING_COUNT, {"stateVarName": "count", "snapshotStartBatchId": 0,
                     "snapshotPartitionId": 7}),
    (PROCESSING_TIMERS, {"stateVarName": "$procTimers_keyToTimestamp"}),
    (PROCESSING_TIMERS, {"stateVarName": "$procTimers_timestampToKey"}),
]


@pytest.mark.parametrize(("scenario", "options"), ERRORS,
                         ids=[f"{s.name}-{json.dumps(o)}" for s, o in ERRORS])
def test_a_bad_read_fails_with_pysparks_error(switched: Any, pairs: Pairs, scenario: Scenario,
                                              options: dict[str, Any]) -> None:
    pyspark, dropin = both(switched, pairs.get(scenario), **options)
    assert pyspark.error is not None
    assert dropin.error == pyspark.error


def test_a_bad_read_fails_at_load_as_pysparks_does(switched: Any, pairs: Pairs) -> None:
    from pyspark.errors import SparkRuntimeException

    pair = pairs.get(RUNNING_COUNT)
    for checkpoint in (pair.pyspark, pair.dropin):
        reader = switched.read.format("statestore").option("stateVarName", "nope")
        with pytest.raises(SparkRuntimeException, match="STDS_INVALID_OPTION_VALUE"):
            reader.load(str(checkpoint))  # before any action


@pytest.mark.parametrize(("options", "why"), [
    ({"stateVarName": "count", "batchId": "abc"}, "'batchId': For input string: \"abc\""),
    ({"stateVarName": "count", "operatorId": 1}, "'operatorId': batch 3 has no stateful "
                                                 "operator 1"),
    ({"stateVarName": "count", "joinSide": "left"}, "'joinSide': transformWithState state has "
                                                    "no join side"),
])
def test_where_pysparks_error_says_little_the_switch_names_the_option(
        switched: Any, pairs: Pairs, options: dict[str, Any], why: str) -> None:
    dropin = read(switched, "statestore", pairs.get(RUNNING_COUNT).dropin, **options)
    assert dropin.error is not None
    assert dropin.error[0] == "STDS_INVALID_OPTION_VALUE.WITH_MESSAGE"
    assert why in dropin.error[1]


# --- the switch's routing ---------------------------------------------------------------------

def test_reads_of_pysparks_checkpoint_are_sparks_own_with_the_switch_on_or_off(
        spark: Any, pairs: Pairs) -> None:
    import pyspark_dstl

    pair = pairs.get(RUNNING_COUNT)
    off = read(spark, "statestore", pair.pyspark, stateVarName="count")
    pyspark_dstl.install()
    try:
        on = read(spark, "statestore", pair.pyspark, stateVarName="count")
        metadata_on = metadata_rows(spark, pair.pyspark)
    finally:
        pyspark_dstl.uninstall()
    assert off.error is None, off.error
    assert on == off
    assert metadata_on == metadata_rows(spark, pair.pyspark)


def test_without_the_switch_spark_finds_none_of_its_state_in_the_switchs_location(
        spark: Any, pairs: Pairs) -> None:
    pair = pairs.get(RUNNING_COUNT)
    assert read(spark, "statestore", pair.dropin, stateVarName="count").error is not None
    by_name = read(spark, "dstl-statestore", pair.dropin, stateVarName="count")
    sparks = read(spark, "statestore", pair.pyspark, stateVarName="count")
    assert sparks.error is None, sparks.error
    assert by_name == sparks  # this backend's source, by its own name, answers as Spark's


def test_spark_session_reads_inside_foreach_batch_see_the_same_as_pyspark(
        switched: Any, pairs: Pairs, tmp_path: Path) -> None:
    pair = pairs.get(RUNNING_COUNT)
    seen: dict[str, Any] = {}

    def reads(batch: Any, batch_id: int) -> None:
        session = batch.sparkSession
        for engine in ("pyspark", "dropin"):
            checkpoint = pair.checkpoint(engine)
            seen[engine] = (read(session, "statestore", checkpoint, stateVarName="count"),
                            read(session, "state-metadata", checkpoint),
                            read(session, "statestore", checkpoint, stateVarName="count",
                                 readChangeFeed="true", changeStartBatchId=1))

    import pandas as pd

    (tmp_path / "in").mkdir()
    pd.DataFrame({"x": [1]}).to_parquet(tmp_path / "in" / "part-0.parquet")
    query = (switched.readStream.schema("x long").parquet(str(tmp_path / "in"))
             .writeStream.foreachBatch(reads).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "reader")).start())
    query.awaitTermination(300)
    assert query.exception() is None
    assert seen["pyspark"][0].error is None
    assert seen["dropin"] == seen["pyspark"]


def test_by_its_own_name_a_bad_read_carries_sparks_condition_in_pysparks_wrapper(
        spark: Any, pairs: Pairs) -> None:
    reader = (spark.read.format("dstl-statestore").option("stateVarName", "nope")
              .option("settings", "{}"))
    with pytest.raises(Exception, match=r"\[STDS_INVALID_OPTION_VALUE.WITH_MESSAGE\] Invalid "
                                        r"value for source option 'stateVarName'"):
        reader.load(str(pairs.get(RUNNING_COUNT).dropin)).collect()
