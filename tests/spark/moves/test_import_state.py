"""import-state: a PySpark transformWithState(InPandas) query runs natively for two batches and
stops; its state is imported; the same query goes on on this backend. Batches 2 and 3 must equal
those of a PySpark run that was never interrupted, batch by batch, and the imported TTL expiries
and timer times must be Spark's own.

Both sides run step by step in lockstep (as tests/support/tws_compare.py's processing-time
scenarios): step i writes input file i, then each query runs once (a once trigger: exactly one
batch). The processors shared with the other move tests live in tests/support/move_processors.py
(executors import them by module name), those of this module alone below.
"""

from __future__ import annotations

import io
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import TimerValues

from pyspark_dstl import import_state, read_state, stateful
from pyspark_dstl.cli import main as cli_main
from pyspark_dstl.spark.moves.import_state import (
    ImportStateError,
    IncompleteSparkCheckpointError,
    NoTransformWithStateError,
    ProcessorMismatchError,
    SparkCheckpointError,
    TargetNotEmptyError,
)
from tests.support.move_processors import LONG_MS, Journey, SessionRows, spark_state
from tests.support.tws_compare import (
    COMPARE_SETTINGS,
    PYSPARK_STATE_SETTINGS,
    Run,
    assert_same_batches,
    await_query,
    session_conf,
    write_input,
)
from tests.support.tws_scenarios import at
from tests.support.versions import needs_row_api

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PAUSE_S = 1.5


# ---- processors of this module's own ------------------------------------------------------


class RateTotals(StatefulProcessor):
    """Per bucket of the rate source's values: the batch's range and count, and the totals."""

    OUTPUT = "bucket long, lo long, hi long, n long, total_n long, total_sum long"

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.totals = handle.getValueState("totals", "n long, total long")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        values = [int(v) for frame in rows for v in frame["value"]]
        before = self.totals.get() or (0, 0)
        after = (before[0] + len(values), before[1] + sum(values))
        self.totals.update(after)
        yield pd.DataFrame({"bucket": [key[0]], "lo": [min(values)], "hi": [max(values)],
                            "n": [len(values)], "total_n": [after[0]], "total_sum": [after[1]]})

    def close(self) -> None:
        pass


class CountOnly(StatefulProcessor):
    """Declares one value state: not the processor of the Journey query."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "n long", LONG_MS)

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Any:
        return iter(())

    def close(self) -> None:
        pass


# ---- running the two sides -------------------------------------------------------------------

Starter = Callable[[Any, Path, Callable[[Any, int], None]], Any]  # (df, ckpt, sink) -> query


def pyspark_starter(processor: Any, output: str, time_mode: str, row_api: bool) -> Starter:
    def start(df: Any, checkpoint: Path, sink: Callable[[Any, int], None]) -> Any:
        grouped = df.groupBy("user")
        method = grouped.transformWithState if row_api else grouped.transformWithStateInPandas
        out = method(statefulProcessor=processor, outputStructType=output,
                     outputMode="Update", timeMode=time_mode)
        return (out.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
                .trigger(once=True).start())

    return start


def dstl_starter(processor: Any, output: str, time_mode: str, row_api: bool) -> Starter:
    def start(df: Any, checkpoint: Path, sink: Callable[[Any, int], None]) -> Any:
        grouped = stateful(df).group_by("user")
        method = grouped.transformWithState if row_api else grouped.transformWithStateInPandas
        stream = method(statefulProcessor=processor, outputStructType=output,
                        outputMode="Update", timeMode=time_mode,
                        checkpoint_location=str(checkpoint))
        return stream.foreach_batch(sink).start(engine_checkpoint=str(checkpoint / "engine"),
                                                trigger={"once": True})

    return start


def dropin_starter(processor: Any, output: str, time_mode: str, row_api: bool) -> Starter:
    """PySpark's own query (pyspark_starter's, word for word) with the drop-in switch on: its
    checkpointLocation is the imported checkpoint."""
    native = pyspark_starter(processor, output, time_mode, row_api)

    def start(df: Any, checkpoint: Path, sink: Callable[[Any, int], None]) -> Any:
        import pyspark_dstl

        pyspark_dstl.install()
        try:
            return native(df, checkpoint, sink)
        finally:
            pyspark_dstl.uninstall()

    return start


def side_by_side(spark: Any, root: Path, frames: list[pd.DataFrame], pauses: list[float],
                 input_schema: str, watermark: tuple[str, str] | None,
                 native: Starter, here: Starter,
                 do_import: Callable[[Path, Path], None]) -> tuple[Run, Run]:
    """(the uninterrupted PySpark run, PySpark for two steps then this backend)."""
    inputs = root / "in"
    reference, split = Run("pyspark"), Run("pyspark, then dstl")
    spark_checkpoint, checkpoint = root / "pyspark-split", root / "dstl"

    def stream() -> Any:
        df = spark.readStream.schema(input_schema).parquet(str(inputs))
        return df.withWatermark(*watermark) if watermark is not None else df

    def once(run: Run, start: Starter, location: Path) -> None:
        run.runs.append([])
        await_query(start(stream(), location, run.sink))

    with session_conf(spark, COMPARE_SETTINGS):
        for index, frame in enumerate(frames):
            time.sleep(pauses[index])
            write_input(inputs, index, frame)
            with session_conf(spark, PYSPARK_STATE_SETTINGS):
                once(reference, native, root / "pyspark-reference")
                if index < 2:
                    once(split, native, spark_checkpoint)
            if index == 1:
                do_import(spark_checkpoint, checkpoint)
            if index >= 2:
                once(split, here, checkpoint)
    return reference, split


# ---- the tests -------------------------------------------------------------------------------


def test_pandas_processing_time_query_goes_on_here_with_its_state(spark: Any,
                                                                   tmp_path: Path) -> None:
    frames = [pd.DataFrame({"user": users, "v": pd.array(values, dtype="int64")})
              for users, values in ((["a", "a", "b"], [1, 2, 3]),
                                    (["a", "c", "b"], [5, 7, 10]),  # a, b arm short timers
                                    (["a", "d", "c"], [11, 20, 8]),  # d arms one
                                    (["b", "a", "d"], [16, 4, 21]))]
    native = pyspark_starter(Journey(), Journey.OUTPUT, "ProcessingTime", row_api=False)
    here = dstl_starter(Journey(), Journey.OUTPUT, "ProcessingTime", row_api=False)
    reports = []

    def do_import(spark_checkpoint: Path, checkpoint: Path) -> None:
        reports.append(import_state(spark, str(spark_checkpoint), str(checkpoint), Journey()))

    reference, split = side_by_side(spark, tmp_path, frames, [0, PAUSE_S, PAUSE_S, PAUSE_S],
                                    "user string, v long", None, native, here, do_import)

    assert sorted(reference.batches) == [0, 1, 2, 3]
    assert_same_batches(reference, split)
    assert split.runs == [[0], [1], [2], [3]]
    timer_rows = {(b, row[0]) for b, rows in split.batches.items() for row in rows
                  if row[1] == "timer"}
    assert timer_rows == {(2, "a"), (2, "b"), (3, "d")}  # imported timers fired here
    report = reports[0]
    assert (report.batch_id, report.partitions, report.key_columns) == (1, 2, ("user",))
    assert set(report.variables) == {"count", "items", "pages", "last"}

    # the imported state is Spark's, TTL expiries and timer times included
    spark_checkpoint, checkpoint = tmp_path / "pyspark-split", tmp_path / "dstl"
    mine = read_state(spark, str(checkpoint), 1).toPandas()
    ours: dict[tuple[str, str, str], Any] = {}
    for row in mine.itertuples():
        key = json.loads(row.key)[0]
        detail = row.map_key if row.kind == "map" else row.value if row.kind == "timer" else ""
        expiry = None if pd.isna(row.expires_at_ms) else int(row.expires_at_ms)
        value = row.value
        if row.state_variable == "last":  # its map field's pairs, in any order
            fields = json.loads(value)
            value = json.dumps([*fields[:4], sorted(fields[4])])
        ours[(row.state_variable, key, str(detail))] = (value, expiry)
    theirs: dict[tuple[str, str, str], Any] = {}
    for row in spark_state(spark, spark_checkpoint, 1, stateVarName="count"):
        theirs[("count", row["key"][0], "")] = (json.dumps([row["value"]["value"]["n"]]),
                                               row["value"]["ttlExpirationMs"])
    for row in spark_state(spark, spark_checkpoint, 1, stateVarName="last"):
        last = row["value"]  # stored here as the compat path stores it: micros, exact decimal
        micros = round(last["at"].timestamp() * 1_000_000)  # a naive local datetime
        theirs[("last", row["key"][0], "")] = (json.dumps(
            [last["v"], last["note"], micros, str(last["price"]),
             sorted([k, v] for k, v in last["tags"].items())]), None)
    for row in spark_state(spark, spark_checkpoint, 1, stateVarName="pages"):
        theirs[("pages", row["key"][0], json.dumps(list(row["user_map_key"])))] = (
            json.dumps([row["user_map_value"]["value"]["hits"]]),
            row["user_map_value"]["ttlExpirationMs"])
    for row in spark_state(spark, spark_checkpoint, 1, stateVarName="items",
                           flattenCollectionTypes="false"):
        elements = row["list_value"]
        theirs[("items", row["key"][0], "")] = (
            json.dumps([[e["value"]["v"]] for e in elements]),
            min(e["ttlExpirationMs"] for e in elements))
    for row in spark_state(spark, spark_checkpoint, 1, readRegisteredTimers="true"):
        expiry = row["expiration_timestamp_ms"]
        theirs[("timers", row["key"][0], str(expiry))] = (str(expiry), expiry)
    assert {k: (json.loads(v[0]), v[1]) for k, v in ours.items()} == \
        {k: (json.loads(v[0]), v[1]) for k, v in theirs.items()}

    # the target now holds state; a processor that does not declare it is refused
    with pytest.raises(TargetNotEmptyError, match="already holds state"):
        import_state(spark, str(spark_checkpoint), str(checkpoint), Journey())
    with pytest.raises(ProcessorMismatchError) as refused:
        import_state(spark, str(spark_checkpoint), str(tmp_path / "other"), CountOnly())
    assert str(refused.value).startswith("state variable 'items' (list state) of the Spark "
                                         "query is not declared by CountOnly.init()")


@needs_row_api
def test_row_based_event_time_query_goes_on_with_the_switch_after_the_command(spark: Any,
                                                                      tmp_path: Path) -> None:
    def events(*triples: tuple[str, float, int]) -> pd.DataFrame:
        return pd.DataFrame({"user": [t[0] for t in triples], "ts": [at(t[1]) for t in triples],
                             "v": pd.array([t[2] for t in triples], dtype="int64")})

    frames = [events(("a", 0, 1), ("b", 1, 2)),
              events(("a", 3, 3), ("c", 20, 4)),  # next watermark: 10 s
              events(("c", 22, 5), ("d", 40, 6), ("e", 2, 7)),  # a, b close; e is not late yet
              events(("d", 41, 8), ("f", 50, 9), ("a", 5, 10))]  # c closes; a@5 is late
    native = pyspark_starter(SessionRows(), SessionRows.OUTPUT, "EventTime", row_api=True)
    here = dropin_starter(SessionRows(), SessionRows.OUTPUT, "EventTime", row_api=True)
    printed = io.StringIO()

    def do_import(spark_checkpoint: Path, checkpoint: Path) -> None:
        status = cli_main(["import-state", str(spark_checkpoint), str(checkpoint),
                           "--processor", f"{SessionRows.__module__}:SessionRows"], out=printed)
        assert status == 0

    reference, split = side_by_side(spark, tmp_path, frames, [0, 0, 0, 0],
                                    "user string, ts timestamp, v long", ("ts", "10 seconds"),
                                    native, here, do_import)

    assert sorted(reference.batches) == [0, 1, 2, 3]
    assert_same_batches(reference, split)
    closed = {(b, row[0]) for b, rows in split.batches.items() for row in rows
              if row[1] == "closed"}
    assert {(2, "a"), (2, "b"), (3, "c")} <= closed
    assert printed.getvalue().startswith("imported batch 1: ")


def test_rate_source_goes_on_from_the_next_row(spark: Any, tmp_path: Path) -> None:
    """The rate source keeps its start time under sources/ and its position in the offset log:
    after the switch every value is processed exactly once, none twice, none skipped."""
    spark_checkpoint, checkpoint = tmp_path / "pyspark", tmp_path / "dstl"
    batches: dict[int, list[tuple[Any, ...]]] = {}

    def sink(df: Any, batch_id: int) -> None:
        batches[batch_id] = [tuple(row) for row in df.collect()]

    def rates() -> Any:
        from pyspark.sql import functions as F

        return (spark.readStream.format("rate").option("rowsPerSecond", 20)
                .option("numPartitions", 1).load()
                .select((F.col("value") % 3).alias("bucket"), "value"))

    with session_conf(spark, COMPARE_SETTINGS):
        with session_conf(spark, PYSPARK_STATE_SETTINGS):
            for _ in range(8):  # until PySpark committed two batches with rows
                if sum(1 for rows in batches.values() if rows) >= 2:
                    break
                time.sleep(PAUSE_S)
                out = rates().groupBy("bucket").transformWithStateInPandas(
                    statefulProcessor=RateTotals(), outputStructType=RateTotals.OUTPUT,
                    outputMode="Update", timeMode="None")
                await_query(out.writeStream.foreachBatch(sink)
                            .option("checkpointLocation", str(spark_checkpoint))
                            .trigger(once=True).start())
        before = max(batches)
        report = import_state(spark, str(spark_checkpoint), str(checkpoint), RateTotals())
        assert report.batch_id == before
        for _ in range(2):
            time.sleep(PAUSE_S)
            stream = stateful(rates()).group_by("bucket").transformWithStateInPandas(
                statefulProcessor=RateTotals(), outputStructType=RateTotals.OUTPUT,
                outputMode="Update", timeMode="None", checkpoint_location=str(checkpoint))
            await_query(stream.foreach_batch(sink).start(trigger={"once": True}))

    assert sorted(b for b in batches if b > before) == [before + 1, before + 2]
    assert all(batches[b] for b in (before + 1, before + 2))
    ranges = sorted((lo, hi, n) for rows in batches.values() for _, lo, hi, n, _, _ in rows)
    newest = max(hi for _, hi, _ in ranges)
    assert sum(n for _, _, n in ranges) == newest + 1  # every value once
    final = {row[0]: row for b in sorted(batches) for row in batches[b]}
    assert sum(row[4] for row in final.values()) == newest + 1
    assert sum(row[5] for row in final.values()) == newest * (newest + 1) // 2
    first_here = min(lo for b in (before + 1, before + 2) for _, lo, _, _, _, _ in batches[b])
    last_there = max(hi for b in batches if b <= before for _, _, hi, _, _, _ in batches[b])
    assert first_here > last_there


def _fake_spark_checkpoint(root: Path, offsets: int, commits: int) -> Path:
    """A Spark checkpoint's logs, written by hand: `offsets` entries, `commits` commits."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text('{"id":"00000000-0000-0000-0000-000000000000"}')
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1_700_000_000_000,
            "conf": {"spark.sql.shuffle.partitions": "2"}}
    for batch in range(offsets):
        (root / "offsets" / str(batch)).write_text(
            f'v1\n{json.dumps(meta)}\n{{"logOffset":{batch}}}')
    for batch in range(commits):
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return root


def test_refuses_a_spark_checkpoint_that_did_not_stop_after_a_commit(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _fake_spark_checkpoint(tmp_path / "spark", offsets=2, commits=1)
    with pytest.raises(IncompleteSparkCheckpointError) as refused:
        import_state(spark, str(source), str(tmp_path / "dstl"), Journey())
    first = str(refused.value).splitlines()[0]
    assert "batch 1 is in offsets/ but not in commits/" in first
    assert "stop it, then import" in first
    assert isinstance(refused.value, ImportStateError)
    assert not (tmp_path / "dstl" / "engine").exists()

    capsys.readouterr()
    status = cli_main(["import-state", str(source), str(tmp_path / "dstl"),
                       "--processor", f"{Journey.__module__}:Journey"], out=io.StringIO())
    assert status == 2
    assert "batch 1 is in offsets/ but not in commits/" in capsys.readouterr().err


def test_refuses_a_spark_checkpoint_without_transform_with_state(spark: Any,
                                                                 tmp_path: Path) -> None:
    inputs, source = tmp_path / "in", tmp_path / "spark"
    write_input(inputs, 0, pd.DataFrame({"user": ["a", "b"], "v": pd.array([1, 2],
                                                                           dtype="int64")}))
    counts = (spark.readStream.schema("user string, v long").parquet(str(inputs))
              .groupBy("user").count())
    query = (counts.writeStream.outputMode("update").foreachBatch(lambda df, batch: df.collect())
             .option("checkpointLocation", str(source)).trigger(availableNow=True).start())
    await_query(query)
    with pytest.raises(NoTransformWithStateError) as refused:
        import_state(spark, str(source), str(tmp_path / "dstl"), Journey())
    first = str(refused.value).splitlines()[0]
    assert "has no transformWithState operator" in first
    assert "transformWithState / transformWithStateInPandas state only" in first


def test_refuses_a_target_that_already_holds_state(spark: Any, tmp_path: Path) -> None:
    source = _fake_spark_checkpoint(tmp_path / "spark", offsets=1, commits=1)
    target = tmp_path / "dstl"
    (target / "commits").mkdir(parents=True)
    (target / "commits" / "0.0").write_text("{}")
    with pytest.raises(TargetNotEmptyError) as refused:
        import_state(spark, str(source), str(target), Journey())
    assert str(refused.value).splitlines()[0].startswith(
        f"checkpoint {target.as_uri()!r} already holds state (commits/ is not empty)")

    shutil.rmtree(target / "commits")
    (target / "engine" / "offsets").mkdir(parents=True)
    with pytest.raises(TargetNotEmptyError, match=r"engine checkpoint .* is not empty"):
        import_state(spark, str(source), str(target), Journey())


def test_refuses_checkpoints_that_are_not_local(spark: Any, tmp_path: Path) -> None:
    source = _fake_spark_checkpoint(tmp_path / "spark", offsets=1, commits=1)
    with pytest.raises(SparkCheckpointError) as refused:
        import_state(spark, "s3a://bucket/ckpt", str(tmp_path / "dstl"), Journey())
    assert str(refused.value).startswith("Spark checkpoint 's3a://bucket/ckpt': import-state "
                                         "works on local checkpoints only")
    with pytest.raises(SparkCheckpointError, match="import into a local directory"):
        import_state(spark, str(source), "s3://bucket/dstl", Journey())
