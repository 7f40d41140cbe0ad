"""Run one scenario through PySpark's transformWithStateInPandas and through this backend, in one
SparkSession, and compare what each sink received, batch by batch.

How the batches are made the same on both sides:

- Input: one parquet file per micro-batch, read with maxFilesPerTrigger=1 (files are ordered by
  modification time, set one second apart), so batch i reads file i on both engines.
- Without processing time (time modes None and EventTime) a query runs with availableNow and
  stops by itself. In EventTime both engines add one batch without data when the watermark
  moved past the one the last batch used (Spark's no-data batch; here the tick source). Before
  PySpark 4.2, which refuses availableNow with timers on this backend, an EventTime query runs
  with a processingTime trigger on both engines until all input is processed, then stops.
- With processing time, Spark's availableNow never stops (such a query always asks for one more
  batch) and its no-data batches depend on the wall clock, so these scenarios run step by step
  instead: step i pauses, writes file i, and runs each engine's query with a once trigger (one
  batch on both engines, each a restart on its checkpoint). Pauses are far longer than the
  short TTLs and timers and far shorter than the long ones, so which timers fired is
  deterministic even on a loaded machine. Every step carries a file because Spark runs no
  batch for a restarted query without new input, even with timers due.

Normalisation: a sink keeps each batch's rows as tuples sorted within the batch (partitions
finish in any order); a batch id seen twice (a replay) keeps its last rows. Nothing else is
changed: values, nulls, types and batch ids must match exactly.

PySpark's queries use the RocksDB state store provider (with the default one transformWithState
fails: UNSUPPORTED_FEATURE.STORE_BACKEND_NOT_SUPPORTED_FOR_TWS),
with changelog checkpointing so a batch commits a changelog instead of a full snapshot (faster
here; both are valid configurations). These are session settings: they are set for the time
of the PySpark query only and restored after it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from pyspark_dstl.spark.session import session_settings
from tests.support.tws_scenarios import Scenario
from tests.support.versions import AVAILABLE_NOW_TIMERS

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PYSPARK_STATE_SETTINGS = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}
COMPARE_SETTINGS = {"spark.sql.shuffle.partitions": "2"}  # both engines: two state partitions
RUN_TIMEOUT_S = 240.0

Rows = list[tuple[Any, ...]]


# --- session settings ----------------------------------------------------------------------


session_conf = session_settings  # settings for a block, then put back as they were


# --- inputs --------------------------------------------------------------------------------


def write_input(directory: Path, index: int, frame: pd.DataFrame) -> None:
    """File `index` of the input, modified one second after file index-1 (Spark's file
    source orders new files by modification time; ties would make batches arbitrary)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"part-{index:05d}.parquet"
    frame.to_parquet(path, index=False, coerce_timestamps="us")
    stamp = _MTIME_BASE + index
    os.utime(path, (stamp, stamp))


_MTIME_BASE = int(time.time()) - 3600


def input_stream(spark: Any, scenario: Scenario, directory: Path) -> Any:
    df = (spark.readStream.schema(scenario.input_schema).option("maxFilesPerTrigger", 1)
          .parquet(str(directory)))
    if scenario.watermark is not None:
        df = df.withWatermark(*scenario.watermark)
    return df


def initial_state(spark: Any, scenario: Scenario) -> Any:
    if scenario.initial_state is None:
        return None
    return (spark.createDataFrame(scenario.initial_state, schema=scenario.initial_schema)
            .groupBy(*scenario.keys))


# --- sinks and results ---------------------------------------------------------------------


def _order(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((value is None, value) for value in row)


def sorted_rows(rows: list[Any]) -> Rows:
    return sorted((tuple(row) for row in rows), key=_order)


@dataclass
class Run:
    """What one engine's sink received: rows per batch id, and the batch ids of each query
    run (a step or a phase)."""

    engine: str
    batches: dict[int, Rows] = field(default_factory=dict)
    runs: list[list[int]] = field(default_factory=list)
    seconds: float = 0.0
    checkpoint: Path | None = None
    observer: Callable[[int, Rows], None] | None = None  # told of every batch as it comes

    def sink(self, df: Any, batch_id: int) -> None:
        self.batches[batch_id] = sorted_rows(df.collect())
        if batch_id not in self.runs[-1]:
            self.runs[-1].append(batch_id)
        if self.observer is not None:
            self.observer(batch_id, self.batches[batch_id])

    def all_rows(self) -> Rows:
        return sorted((row for rows in self.batches.values() for row in rows), key=_order)


def describe_difference(expected: Run, actual: Run) -> str:
    lines = [f"{expected.engine} and {actual.engine} differ:"]
    for batch in sorted(set(expected.batches) | set(actual.batches)):
        left, right = expected.batches.get(batch), actual.batches.get(batch)
        if left == right:
            continue
        lines.append(f"  batch {batch}:")
        lines.append(f"    {expected.engine}: {left if left is not None else 'no batch'}")
        lines.append(f"    {actual.engine}: {right if right is not None else 'no batch'}")
    return "\n".join(lines)


def assert_same_batches(expected: Run, actual: Run) -> None:
    assert expected.batches == actual.batches, describe_difference(expected, actual)


# --- the two engines -----------------------------------------------------------------------


Starter = Callable[[Any, dict[str, Any]], Any]  # (input df, trigger) -> StreamingQuery


class PySparkEngine:
    """PySpark's own transformWithStateInPandas / transformWithState, RocksDB provider."""

    name = "pyspark"

    @contextmanager
    def settings(self, spark: Any) -> Iterator[None]:
        with session_conf(spark, PYSPARK_STATE_SETTINGS):
            yield

    def start(self, df: Any, scenario: Scenario, processor: Any, checkpoint: Path,
              sink: Callable[[Any, int], None], trigger: Mapping[str, Any]) -> Any:
        grouped = df.groupBy(*scenario.keys)
        method = (grouped.transformWithState if scenario.row_api
                  else grouped.transformWithStateInPandas)
        output = method(statefulProcessor=processor, outputStructType=scenario.output_schema,
                        outputMode="Update", timeMode=scenario.time_mode,
                        initialState=initial_state(df.sparkSession, scenario))
        return (output.writeStream.foreachBatch(sink)
                .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())


class DstlEngine:
    """This backend's compatibility entry point: the same call on `stateful(df).group_by`."""

    name = "dstl"

    @contextmanager
    def settings(self, spark: Any) -> Iterator[None]:
        yield

    def start(self, df: Any, scenario: Scenario, processor: Any, checkpoint: Path,
              sink: Callable[[Any, int], None], trigger: Mapping[str, Any]) -> Any:
        from pyspark_dstl import stateful

        grouped = stateful(df).group_by(*scenario.keys)
        method = (grouped.transformWithState if scenario.row_api
                  else grouped.transformWithStateInPandas)
        stream = method(statefulProcessor=processor, outputStructType=scenario.output_schema,
                        outputMode="Update", timeMode=scenario.time_mode,
                        initialState=initial_state(df.sparkSession, scenario),
                        checkpoint_location=str(checkpoint))
        return stream.foreach_batch(sink).start(trigger=dict(trigger))


class DropInEngine(PySparkEngine):
    """PySpark's own calls, word for word as PySparkEngine makes them, with the drop-in switch
    installed: the query runs on this backend."""

    name = "dropin"

    @contextmanager
    def settings(self, spark: Any) -> Iterator[None]:
        import pyspark_dstl

        already = pyspark_dstl.installed()
        pyspark_dstl.install()
        try:
            yield
        finally:
            if not already:
                pyspark_dstl.uninstall()


Engine = PySparkEngine | DstlEngine | DropInEngine
ENGINES: dict[str, Engine] = {"pyspark": PySparkEngine(), "dstl": DstlEngine(),
                              "dropin": DropInEngine()}


def await_query(query: Any, timeout: float = RUN_TIMEOUT_S) -> None:
    """Wait for a query that stops by itself; a query still running after `timeout` is
    stopped and reported (with the engine's error, if it failed)."""
    if not query.awaitTermination(timeout):
        query.stop()
        raise AssertionError(f"query {query.id} did not stop within {timeout} s")
    error = query.exception()
    if error is not None:
        raise AssertionError(f"query {query.id} failed: {error}")


def process_all_available(query: Any) -> None:
    """Run a query with a processingTime trigger until a trigger finds nothing to do (no input
    and no batch without input), then stop it; its error, if it failed, is reported."""
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    error = query.exception()
    if error is not None:
        raise AssertionError(f"query {query.id} failed: {error}")


# --- ways to run a scenario ----------------------------------------------------------------


@dataclass(frozen=True)
class Workspace:
    """Where one comparison keeps its files: a shared input directory and one checkpoint
    per engine."""

    root: Path

    @property
    def inputs(self) -> Path:
        return self.root / "in"

    def checkpoint(self, engine: str) -> Path:
        return self.root / f"ckpt-{engine}"


def run_phases(spark: Any, scenario: Scenario, engine_name: str, workspace: Workspace,
               phases: list[list[int]] | None = None, processor: Any = None,
               observer: Callable[[int, Rows], None] | None = None) -> Run:
    """Run `scenario` (without processing time) on one engine: one availableNow query per
    phase, each a restart on the same checkpoint; `phases` lists the input files written before
    each run (default: all of them, one run)."""
    engine = ENGINES[engine_name]
    phases = phases or [list(range(len(scenario.batches)))]
    run = Run(engine.name, checkpoint=workspace.checkpoint(engine.name), observer=observer)
    trigger = ({"availableNow": True} if AVAILABLE_NOW_TIMERS or scenario.time_mode == "None"
               else {"processingTime": "0 seconds"})
    processor = processor if processor is not None else scenario.processor()
    started = time.monotonic()
    with session_conf(spark, COMPARE_SETTINGS), engine.settings(spark):
        for files in phases:
            for index in files:
                write_input(workspace.inputs, index, scenario.batches[index])
            run.runs.append([])
            query = engine.start(input_stream(spark, scenario, workspace.inputs), scenario,
                                 processor, workspace.checkpoint(engine.name), run.sink,
                                 trigger)
            if "availableNow" in trigger:
                await_query(query)
            else:
                process_all_available(query)
    run.seconds = time.monotonic() - started
    return run


def run_steps(spark: Any, scenario: Scenario, workspace: Workspace,
              engines: tuple[str, ...] = ("pyspark", "dstl")) -> dict[str, Run]:
    """A processing-time scenario, both engines in lockstep: step i waits `pauses[i]`, writes
    file i, then runs each engine's query once (a once trigger: exactly one batch)."""
    assert scenario.pauses is not None and len(scenario.pauses) == len(scenario.batches)
    runs = {name: Run(name, checkpoint=workspace.checkpoint(name)) for name in engines}
    processors = {name: scenario.processor() for name in engines}
    with session_conf(spark, COMPARE_SETTINGS):
        for index, (pause, frame) in enumerate(zip(scenario.pauses, scenario.batches,
                                                   strict=True)):
            time.sleep(pause)
            write_input(workspace.inputs, index, frame)
            for name in engines:
                engine, run = ENGINES[name], runs[name]
                run.runs.append([])
                started = time.monotonic()
                with engine.settings(spark):
                    query = engine.start(input_stream(spark, scenario, workspace.inputs),
                                         scenario, processors[name],
                                         workspace.checkpoint(name), run.sink, {"once": True})
                    await_query(query)
                run.seconds += time.monotonic() - started
    return runs


class ReferenceRuns:
    """PySpark's run of each scenario, made once per test session and shared by the tests
    that compare against it."""

    def __init__(self, spark: Any, root: Path) -> None:
        self.spark = spark
        self.root = root
        self._runs: dict[str, Run] = {}

    def get(self, scenario: Scenario) -> Run:
        if scenario.name not in self._runs:
            workspace = Workspace(self.root / scenario.name)
            self._runs[scenario.name] = run_phases(self.spark, scenario, "pyspark", workspace)
        return self._runs[scenario.name]


# --- state, read back from each engine's checkpoint ----------------------------------------


@dataclass(frozen=True)
class StateView:
    """A checkpoint's value state variables as {name: {(key..., value fields...)}} and its
    timers as {(key..., expiry ms)}, in the same shape for both engines."""

    values: dict[str, set[tuple[Any, ...]]]
    timers: set[tuple[Any, ...]]


def pyspark_view(spark: Any, checkpoint: Path, variables: tuple[str, ...],
                 batch_id: int | None = None) -> StateView:
    """Through Spark's state data source ("statestore"), one read per variable."""

    def read(**options: str) -> list[Any]:
        reader = spark.read.format("statestore")
        if batch_id is not None:
            reader = reader.option("batchId", batch_id)
        for name, value in options.items():
            reader = reader.option(name, value)
        return list(reader.load(str(checkpoint)).collect())

    values = {name: {(*tuple(row["key"]), *tuple(row["value"]))
                     for row in read(stateVarName=name)} for name in variables}
    timers = {(*tuple(row["key"]), int(row["expiration_timestamp_ms"]))
              for row in read(readRegisteredTimers="true")}
    return StateView(values, timers)


def dstl_view(spark: Any, checkpoint: Path, batch_id: int | None = None) -> StateView:
    """Through this backend's dstl-state reader, in one read (value state and timers)."""
    from pyspark_dstl.spark import read_state

    values: dict[str, set[tuple[Any, ...]]] = {}
    timers: set[tuple[Any, ...]] = set()
    for row in read_state(spark, str(checkpoint), batch_id).collect():
        key = json.loads(row["key"])
        if row["kind"] == "timer":
            timers.add((*key, int(json.loads(row["value"]))))
        elif row["kind"] == "value":
            value = json.loads(row["value"])
            fields = value if isinstance(value, list) else [value]
            values.setdefault(row["state_variable"], set()).add((*key, *fields))
    return StateView(values, timers)


# --- a driver on a standalone cluster (the executor-loss test runs it as a subprocess) -------


def cluster_driver(master: str, scenario_name: str, work_dir: str, local_dir: str,
                   go_file: str) -> None:
    """Run a scenario on this backend against `master`, printing each batch as
    "batch <id> <rows as JSON>" when its sink sees it. After batch 0 it waits for `go_file`
    (the test kills a worker first), then until only one executor is left, and prints
    "executors <n>": batch 1, where timers are due, runs after the loss."""
    from tests.support.spark import cluster_session
    from tests.support.tws_scenarios import SCENARIOS

    spark = cluster_session(master, "dstl-tws-cluster-test", local_dir)

    def executors() -> int:  # the driver is listed too
        # the JVM's tracker: PySpark's StatusTracker.getExecutorInfos is 4.2+
        return len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) - 1

    def show(batch_id: int, rows: Rows) -> None:
        print(f"batch {batch_id} {json.dumps(rows)}", flush=True)
        if batch_id == 0:
            _wait_for(lambda: os.path.exists(go_file), f"{go_file} to appear")
            _wait_for(lambda: executors() <= 1, "the lost executor to be noticed")
            print(f"executors {executors()}", flush=True)

    _wait_for(lambda: executors() >= 2, "both executors to register")
    run_phases(spark, SCENARIOS[scenario_name], "dstl", Workspace(Path(work_dir)),
               observer=show)
    spark.stop()


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout} s for {what}")
        time.sleep(0.2)


if __name__ == "__main__":
    cluster_driver(*sys.argv[1:6])
