"""Benchmark 6: the same keyed running count end to end in PySpark (local[2]), many ways.

(a)  this library, per-key API (StatefulProcessor) through foreachBatch;
(a') this library, vectorized API (VectorizedStatefulProcessor);
(a'') the same with spark.dstl.query.observedMetrics=false (no progress branch: information);
(a''') the same with spark.dstl.query.outputMode=cache (the output stays on the executors:
      information, not the default);
(b)  PySpark's applyInPandasWithState;
(c)  PySpark's transformWithStateInPandas with the README's processor (a count in value state);
(c') PySpark's transformWithState with the same count in Rows;
(c'') PySpark's transformWithStateInPandas with list and map state and event-time timers
      (benchmarks/spark_jobs.py TwsActivity: its own output, compared with (s'') only);
(s), (s'), (s'') the same three PySpark processors, unchanged, through the switch
      (`pyspark_dstl.install()`): the path a user who moves an existing query takes;
(d)  Spark's own streaming groupBy().count(), in the JVM, update output mode;
(e)  the floor: the same read and the same sink work with no state (each batch counted alone).
(b), (c*) and (d) run on Spark's RocksDB state store with changelog checkpointing on and
checkpoint format V2. Input: parquet files of string keys and an event time, one file per
trigger, `availableNow`, 4 state partitions, no batches without new data (so that the timers of
(c'') and (s'') fire in the same batches). Every variant's sink computes (output rows, sum of
counts) per batch, so the runs are checked against each other batch by batch (the floor's
counts are per batch, so only its row counts are compared). The fast variants run `--rounds`
times and the best round counts. After the last round each query is restarted on its
checkpoint with one more file and cold state (the executors' loaded stores are dropped), and
the time to finish that batch is the recovery time.

Three shapes (`--shape`): 50k, 20 files of 50,000 rows over 100,000 keys, where the fixed cost
of a batch decides; 1e6, 10 files of 200,000 rows over 1e6 keys, where the state path per row
does; 20k, 3 files of 20,000 rows that each hold every one of 20,000 keys once (the switch
against Spark's own operator as a new user first tries it). Results in spark_e2e.json,
spark_e2e_1e6.json and spark_e2e_20k.json. Spark's own per-key operators take minutes per
batch, so the slow variants read only the first `slow_files` files (transformWithState:
`tws_files`) and restart on the next one: their batches are compared with the same batches of
the others.

    python -m benchmarks.spark_e2e [--quick] [--shape 50k|1e6|20k]
        [--modes a,a2,a3,a4,b,c,c2,c3,s,s2,s3,d,e] [--rounds 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.harness import (
    Report,
    chosen_modes,
    own_python_workers,
    parse_args,
    plan_of,
    profiled,
    ratio,
    scratch,
    summarize,
)
from benchmarks.plots import bar_plot
from benchmarks.spark_jobs import (
    INPUT_SCHEMA,
    OUTPUT_SCHEMA,
    STATE_SCHEMA,
    PerKeyCount,
    TwsActivity,
    TwsCount,
    TwsCountRows,
    VectorizedCount,
    group_state_count,
)

NAME = "spark_e2e"
FULL: dict[str, Any] = {"files": 20, "rows_per_file": 50_000, "keys": 100_000, "partitions": 4,
                        "warmup": True, "rounds": 2, "slow_files": None, "tws_files": 4,
                        "every_key": False}
QUICK: dict[str, Any] = {"files": 2, "rows_per_file": 1_000, "keys": 500, "partitions": 4,
                         "warmup": False, "rounds": 1, "slow_files": None, "tws_files": None,
                         "every_key": False}
SHAPES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {  # name: (results, full, quick)
    "50k": (NAME, FULL, QUICK),
    "1e6": (f"{NAME}_1e6",
            {**FULL, "files": 10, "rows_per_file": 200_000, "keys": 1_000_000, "slow_files": 2,
             "tws_files": 2},
            {**QUICK, "files": 3, "slow_files": 1, "tws_files": 1}),
    "20k": (f"{NAME}_20k",  # every file holds every key once: 20,000 keys per batch
            {**FULL, "files": 3, "rows_per_file": 20_000, "keys": 20_000, "tws_files": None,
             "every_key": True},
            {**QUICK, "keys": 1_000, "every_key": True}),
}
MODES = {"a": "(a) dstl per-key", "a2": "(a') dstl vectorized",
         "a3": "(a'') dstl vectorized, observedMetrics=false",
         "a4": "(a''') dstl vectorized, outputMode=cache",
         "b": "(b) applyInPandasWithState",
         "c": "(c) transformWithStateInPandas",
         "c2": "(c') transformWithState, Rows",
         "c3": "(c'') transformWithStateInPandas, list/map/timers",
         "s": "(s) the switch: transformWithStateInPandas",
         "s2": "(s') the switch: transformWithState, Rows",
         "s3": "(s'') the switch: list/map/timers",
         "d": "(d) Spark native groupBy().count()", "e": "(e) no-state floor"}
DEFAULT_MODES = ("a", "a2", "a3", "a4", "b", "c", "c2", "s", "s2", "d", "e")
SHAPE_MODES = {"20k": ("c", "c2", "c3", "s", "s2", "s3")}  # a shape's own default modes
DSTL_MODES = ("a", "a2", "a3", "a4")
TWS_MODES = ("c", "c2", "c3")  # Spark's own transformWithState
SWITCH_MODES = ("s", "s2", "s3")  # the same processors through pyspark_dstl.install()
SPARK_STATE_MODES = ("b", *TWS_MODES, "d")  # state in the JVM's state store provider
SLOW_MODES = ("b", *TWS_MODES)  # minutes per run: one round each
# (the switch's run, Spark's run of the same processor)
SWITCH_PAIRS = (("s", "c"), ("s2", "c2"), ("s3", "c3"))
OUTPUT_OF = {"c3": "activity", "s3": "activity"}  # every other mode emits the running count
EVENT_TIME_BASE_MS = 1_700_000_000_000  # even: event times, and so watermarks, are even
FILE_SPAN_MS = 10_000  # file i's event times: [base + i * span, base + (i + 1) * span)
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SPARK_STATE_CONF = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
}
# timers fire in the batch of the next file with both engines (no batch without new input)
SESSION_CONF = {**SPARK_STATE_CONF, "spark.sql.streaming.noDataMicroBatches.enabled": "false"}
Checksums = dict[int, tuple[int, int]]


def make_inputs(directory: Path, plan: dict[str, Any], seed: int) -> list[Path]:
    """`files` + 1 parquet files (the last one is for the restart), names in batch order."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True)
    paths = []
    base = time.time() - 3600
    rows = plan["rows_per_file"]
    for index in range(plan["files"] + 1):
        if plan.get("every_key"):  # every key once per file, in a random order
            users = rng.permutation(plan["keys"])[:rows]
        else:
            users = rng.integers(0, plan["keys"], rows)
        # v: the row's event time in ms (TwsActivity), even, inside the file's own span
        event_ms = (EVENT_TIME_BASE_MS + index * FILE_SPAN_MS
                    + 2 * rng.integers(0, FILE_SPAN_MS // 2, rows))
        frame = pd.DataFrame({"user": [f"user-{u}" for u in users],
                              "v": event_ms.astype(np.int64)})
        path = directory / f"part-{index:05d}.parquet"
        frame.to_parquet(path, index=False)
        # the file source orders files by modification time and breaks ties arbitrarily
        os.utime(path, (base + index, base + index))
        paths.append(path)
    return paths


def checksum_sink(outputs: Checksums) -> Callable[[Any, int], None]:
    """One action per batch: output rows and the sum of the counts (consumes every row)."""
    from pyspark.sql import functions as F

    def sink(df: Any, batch_id: int) -> None:
        row = df.agg(F.count(F.lit(1)).alias("n"), F.sum("count").alias("s")).collect()[0]
        outputs[batch_id] = (int(row["n"]), int(row["s"] or 0))

    return sink


def floor_sink(outputs: Checksums) -> Callable[[Any, int], None]:
    """The no-state floor: the batch's rows counted per key on their own (the same shuffle by
    key and the same sink action as the stateful variants, without any state)."""
    sink = checksum_sink(outputs)

    def count_alone(df: Any, batch_id: int) -> None:
        sink(df.groupBy("user").count(), batch_id)

    return count_alone


def pyspark_processor_frame(source: Any, mode: str) -> Any:
    """The PySpark processor's stateful step of (c*) and (s*), written as a PySpark user
    writes it (the switch, when installed, routes the same call)."""
    if mode in ("c", "s"):
        return source.groupBy("user").transformWithStateInPandas(
            statefulProcessor=TwsCount(), outputStructType=OUTPUT_SCHEMA,
            outputMode="Update", timeMode="None")
    if mode in ("c2", "s2"):
        return source.groupBy("user").transformWithState(
            statefulProcessor=TwsCountRows(), outputStructType=OUTPUT_SCHEMA,
            outputMode="Update", timeMode="None")
    from pyspark.sql import functions as F

    timed = source.withColumn("ts", F.timestamp_millis("v")).withWatermark("ts", "1 second")
    return timed.groupBy("user").transformWithStateInPandas(
        statefulProcessor=TwsActivity(), outputStructType=OUTPUT_SCHEMA,
        outputMode="Update", timeMode="EventTime")


class Run:
    """One variant on its own input folder and checkpoint."""

    def __init__(self, spark: Any, mode: str, work: Path, plan: dict[str, Any]) -> None:
        self.spark = spark
        self.mode = mode
        self.work = work
        self.plan = plan
        self.inputs = work / "in"
        self.outputs: Checksums = {}
        self.stream: Any = None

    def start(self, local_dir: Path) -> Any:
        from pyspark.sql.streaming.state import GroupStateTimeout

        from pyspark_dstl.spark import stateful

        source = (self.spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
                  .parquet(str(self.inputs)))
        sink = checksum_sink(self.outputs)
        if self.mode in DSTL_MODES:
            processor = PerKeyCount() if self.mode == "a" else VectorizedCount()
            conf = {"spark.dstl.stateStore.localDir": str(local_dir)}
            if self.mode == "a3":  # without the progress branch's Spark job per batch
                conf["spark.dstl.query.observedMetrics"] = "false"
            if self.mode == "a4":  # the output stays on the executors (not the default)
                conf["spark.dstl.query.outputMode"] = "cache"
            self.stream = (stateful(source).group_by("user")
                           .process(processor, OUTPUT_SCHEMA,
                                    checkpoint_location=str(self.work / "dstl"),
                                    partitions=self.plan["partitions"], settings=conf)
                           .foreach_batch(sink))
            return self.stream.start(trigger={"availableNow": True},
                                     engine_checkpoint=str(self.work / "engine"))
        if self.mode == "e":
            return (source.writeStream.foreachBatch(floor_sink(self.outputs))
                    .option("checkpointLocation", str(self.work / "engine"))
                    .trigger(availableNow=True).start())
        if self.mode in SWITCH_MODES:
            return self._start_switched(source, sink, local_dir)
        grouped = source.groupBy("user")
        if self.mode == "d":
            frame = grouped.count()
        elif self.mode == "b":
            frame = grouped.applyInPandasWithState(group_state_count, OUTPUT_SCHEMA, STATE_SCHEMA,
                                                   "Update", GroupStateTimeout.NoTimeout)
        else:
            frame = pyspark_processor_frame(source, self.mode)
        return (frame.writeStream.foreachBatch(sink).outputMode("update")
                .option("checkpointLocation", str(self.work / "engine"))
                .trigger(availableNow=True).start())

    def _start_switched(self, source: Any, sink: Any, local_dir: Path) -> Any:
        """The PySpark processor's query exactly as Spark runs it, with the switch on: the
        checkpoint location holds this library's state and Spark's engine checkpoint."""
        import pyspark_dstl

        self.spark.conf.set("spark.dstl.stateStore.localDir", str(local_dir))
        pyspark_dstl.install()
        try:
            frame = pyspark_processor_frame(source, self.mode)
            return (frame.writeStream.foreachBatch(sink).outputMode("update")
                    .option("checkpointLocation", str(self.work / "switch"))
                    .trigger(availableNow=True).start())
        finally:
            pyspark_dstl.uninstall()

    def run(self, local_dir: Path) -> dict[str, Any]:
        began = time.perf_counter()
        with own_python_workers(self.spark, self.mode):
            query = self.start(local_dir)
            query.awaitTermination()
        wall = time.perf_counter() - began
        error = query.exception()
        if error is not None:
            raise RuntimeError(f"{MODES[self.mode]} failed: {error}")
        progress = [_as_dict(p) for p in query.recentProgress]
        batches = [p for p in progress if p.get("numInputRows", 0) > 0]
        rows = sum(int(p["numInputRows"]) for p in batches)
        durations = [p["durationMs"]["triggerExecution"] / 1000 for p in batches]
        commits = self._commit_seconds(batches)
        result = {"wall_seconds": wall, "rows": rows, "batches": len(batches),
                  "batch_seconds": durations, "commit_seconds": commits,
                  "first_batch_seconds": durations[0] if durations else float("nan")}
        if self.stream is not None:  # where this library's batches spend their time
            result["dstl_progress"] = [
                {key: value for key, value in dataclasses.asdict(p).items()
                 if isinstance(value, int | float)} for p in self.stream.progress]
        return result

    def _commit_seconds(self, batches: list[dict[str, Any]]) -> list[float]:
        if self.mode in DSTL_MODES:  # this library reports the slowest task's commit
            return [p.max_task_commit_seconds for p in self.stream.progress[-len(batches):]]
        values = []
        for p in batches:  # Spark's commitTimeMs of the stateful operator (all its tasks)
            operators = p.get("stateOperators") or [{}]
            values.append(float(operators[0].get("commitTimeMs", float("nan"))) / 1000)
        return values

    def add_restart_file(self, source: Path) -> None:
        target = self.inputs / source.name
        shutil.copy(source, target)
        os.utime(target)  # newer than every file already read


def drop_loaded_state(spark: Any) -> str:
    """Unload every state store the executors hold (the JVM's StateStore registry), so the
    restarted Spark queries restore from their checkpoints like ours does."""
    try:
        spark._jvm.org.apache.spark.sql.execution.streaming.state.StateStore.stop()
    except Exception as exc:  # an internal API: say so in the results when it is missing
        return f"could not unload Spark's state stores ({exc}); restart may be warm"
    return "Spark's loaded state stores unloaded (StateStore.stop()) before the restart"


def warm_up(spark: Any, modes: list[str], plan: dict[str, Any], work: Path, seed: int) -> None:
    """One tiny run of every variant first: JIT, Python workers and imports warm for all."""
    warm_plan = {**plan, "files": 1, "rows_per_file": min(200, plan["rows_per_file"])}
    warm_files = make_inputs(work / "warm-inputs", warm_plan, seed)
    for mode in modes:
        warm = Run(spark, mode, work / f"warm-{mode}", warm_plan)
        warm.inputs.mkdir(parents=True)
        os.link(warm_files[0], warm.inputs / warm_files[0].name)
        warm.run(work / f"warm-{mode}" / "local")
    print("  warm-up done", flush=True)


def files_read(mode: str, plan: dict[str, Any], available: int) -> int:
    """How many files a mode reads before its restart: the slow ones fewer."""
    if mode in TWS_MODES and plan.get("tws_files"):
        return min(plan["tws_files"], available)
    if mode in SLOW_MODES and plan.get("slow_files"):
        return min(plan["slow_files"], available)
    return available


def run_all(spark: Any, args: argparse.Namespace, plan: dict[str, Any], modes: list[str],
            work: Path) -> tuple[dict[str, dict[str, Any]], dict[str, list[Checksums]],
                                 list[str]]:
    """Each fast mode's best of `rounds` (round by round across the modes, so a change in the
    machine's load touches all of them alike), the slow ones once; then every mode's restart
    on one more file."""
    files = make_inputs(work / "inputs", plan, args.seed)
    if plan["warmup"]:
        warm_up(spark, modes, plan, work, args.seed + 1)
    measured: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    checks: dict[str, list[Checksums]] = {mode: [] for mode in modes}
    last: dict[str, Run] = {}
    schedule = [(number, mode) for number in range(plan["rounds"]) for mode in modes
                if mode not in SLOW_MODES or number == 0]
    for number, mode in schedule:
        run = last[mode] = Run(spark, mode, work / mode / f"round-{number}", plan)
        run.inputs.mkdir(parents=True)
        for path in files[:files_read(mode, plan, len(files) - 1)]:
            os.link(path, run.inputs / path.name)
        result = run.run(run.work / "local-1")
        measured[mode].append(result)
        checks[mode].append(dict(run.outputs))  # a copy: the restart adds one more batch
        print(f"  {MODES[mode]} round {number + 1}: "
              f"{result['rows'] / result['wall_seconds']:,.0f} rows/s, "
              f"{result['batches']} batches in {result['wall_seconds']:.1f} s", flush=True)
    results: dict[str, dict[str, Any]] = {}
    restarts: dict[str, Checksums] = {}
    notes: list[str] = []
    for mode in modes:
        best = min(measured[mode], key=lambda r: float(r["wall_seconds"]))
        best["round_rows_per_second"] = [r["rows"] / r["wall_seconds"] for r in measured[mode]]
        run = last[mode]
        run.add_restart_file(files[files_read(mode, plan, len(files) - 1)])
        notes.append(f"{MODES[mode]}: {restart_note(spark, mode)}")
        before = set(run.outputs)
        restart = run.run(run.work / "local-2")  # a fresh local directory: cold state
        restarts[mode] = {b: v for b, v in run.outputs.items() if b not in before}
        best["recovery_seconds"] = restart["wall_seconds"]
        best["recovery_batch_seconds"] = restart["first_batch_seconds"]
        print(f"  {MODES[mode]}: restart + one batch in {restart['wall_seconds']:.1f} s",
              flush=True)
        results[mode] = best
    for mode in modes:  # the restart's batch is checked like the others
        checks[mode].append(restarts[mode])
    return results, checks, notes


def restart_note(spark: Any, mode: str) -> str:
    """How a mode's restart starts cold (and, for Spark's state, make it so)."""
    if mode in SPARK_STATE_MODES:
        return drop_loaded_state(spark)
    if mode == "e":
        return "no state: the restart only reads the new file"
    return "restarted with a fresh local directory, so the executors restore the state from " \
           "the checkpoint"


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or NAME, argv, [
        (["--modes"], {"default": None,
                       "help": f"comma-separated from {', '.join(MODES)} (default "
                               f"{','.join(DEFAULT_MODES)}; shape 20k: "
                               f"{','.join(SHAPE_MODES['20k'])})"}),
        (["--shape"], {"choices": sorted(SHAPES), "default": "50k",
                       "help": "50k: 20 files of 50,000 rows over 100,000 keys; "
                               "1e6: 10 files of 200,000 rows over 1e6 keys; "
                               "20k: 3 files, each every one of 20,000 keys once"}),
        (["--files"], {"type": int, "default": None}),
        (["--rounds"], {"type": int, "default": None,
                        "help": "rounds of the fast variants, the best counts (slow: one)"}),
    ])
    name, full, quick = SHAPES[args.shape]
    plan = plan_of(args, quick, full, ("files", "rounds"))
    default = SHAPE_MODES.get(args.shape, DEFAULT_MODES)
    modes = chosen_modes(args.modes or ",".join(default), MODES)
    from tests.support.spark import build_session

    report = Report(name, args, {**plan, "modes": {m: MODES[m] for m in modes},
                                 "master": "local[2]", "trigger": "availableNow",
                                 "maxFilesPerTrigger": 1, "spark_state_conf": SESSION_CONF,
                                 "rounds_of_slow_modes": 1})
    with scratch(args, "spark") as work:
        spark = build_session(master="local[2]", app_name="pyspark-dstl-bench",
                              spark_defaults=True,
                              extra={**SESSION_CONF,
                                     "spark.sql.shuffle.partitions": str(plan["partitions"])})
        try:
            with profiled(args):
                results, checks, notes = run_all(spark, args, plan, modes, work)
        finally:
            spark.stop()
    for note in notes:
        report.note(note)
    agree = check_outputs(report, checks)
    tabulate(report, results, plan, agree, args.shape)
    report.put("samples", results)
    report.put("checksums", {m: [{str(b): list(v) for b, v in c.items()} for c in rounds]
                             for m, rounds in checks.items()})
    bar_plot(report, [MODES[m] for m in results], {"rows/s": [
        results[m]["rows"] / results[m]["wall_seconds"] for m in results]},
        f"Keyed running count, {plan['files']} x {plan['rows_per_file']:,} rows, "
        f"{plan['keys']:,} keys, local[2]", "input rows per second")
    report.save()


def check_outputs(report: Report, checks: dict[str, list[Checksums]]) -> bool:
    """Every run of every stateful variant (each round, then the restart's one batch, last)
    must emit the same (rows, sum of counts) in every batch as the other variants of the same
    output (the running count; TwsActivity's), and every round every batch (the slow variants'
    rounds: their first batches); the floor counts each batch alone, so only its rows per
    batch are compared."""
    families: dict[str, dict[str, list[Checksums]]] = {}
    for mode, runs in checks.items():
        families.setdefault(OUTPUT_OF.get(mode, "count"), {})[mode] = runs
    agree = all(_family_agrees(family) for family in families.values())
    report.note("outputs of all variants agree batch by batch" if agree else
                "OUTPUTS DIFFER between variants: " + json.dumps(
                    {m: [{str(b): v for b, v in c.items()} for c in runs]
                     for m, runs in checks.items()}))
    return agree


def _family_agrees(checks: dict[str, list[Checksums]]) -> bool:
    reference: Checksums = {}
    for mode, runs in checks.items():
        for outputs in runs if mode != "e" else []:
            for batch, value in outputs.items():
                reference.setdefault(batch, value)

    def same(mode: str, outputs: Checksums) -> bool:
        if mode == "e":
            return all(b in reference and n == reference[b][0] for b, (n, _) in outputs.items())
        return all(reference[b] == value for b, value in outputs.items())

    full = {frozenset(runs[i]) for mode, runs in checks.items() if mode not in SLOW_MODES
            for i in range(len(runs) - 1)}
    slow = {frozenset(runs[i]) for mode, runs in checks.items() if mode in SLOW_MODES
            for i in range(len(runs) - 1)}
    expected = full or {max(slow, key=len)}  # every fast round has every batch
    return (bool(reference) and len(expected) == 1
            and all(s <= next(iter(expected)) for s in slow)
            and all(runs[-1] for runs in checks.values())
            and all(same(mode, outputs) for mode, runs in checks.items() for outputs in runs))


def tabulate(report: Report, results: dict[str, dict[str, Any]], plan: dict[str, Any],
             agree: bool, shape: str) -> None:
    rates = {m: r["rows"] / r["wall_seconds"] for m, r in results.items()}
    rows = []
    for mode, r in results.items():
        batches = summarize(r["batch_seconds"])
        commits = summarize(r["commit_seconds"])
        rows.append([MODES[mode], r["rows"], r["wall_seconds"], rates[mode], batches["p50"],
                     batches["p99"], commits["p50"] * 1000, commits["p99"] * 1000,
                     r["recovery_seconds"], ratio(rates[mode], rates.get("b", math.nan)),
                     ratio(rates[mode], rates.get("d", math.nan)),
                     ratio(rates[mode], rates.get("e", math.nan))])
    slow = [f"{MODES[m][:MODES[m].index(')') + 1]} the first "
            f"{files_read(m, plan, plan['files'])} files"
            for m in results if m in SLOW_MODES
            and files_read(m, plan, plan["files"]) < plan["files"]]
    slow_text = f"; {', '.join(slow)} and a restart on the next" if slow else ""
    report.table(f"Keyed running count in PySpark local[2]: {plan['files']} files x "
                 f"{plan['rows_per_file']:,} rows, {plan['keys']:,} keys, "
                 f"{plan['partitions']} state partitions (best of {plan['rounds']} rounds; "
                 f"(b), (c*): one{slow_text})",
                 ["variant", "rows", "wall s", "rows/s", "batch p50 s", "batch p99 s",
                  "commit p50 ms", "commit p99 ms", "restart s", "rows/s vs (b)",
                  "rows/s vs (d)", "rows/s vs (e) floor"], rows)
    tabulate_switch(report, results, rates, agree, shape)
    for mode, base, target in GOALS.get(shape, ()):
        if mode in rates and base in rates:
            value = ratio(rates[mode], rates[base])
            report.goal(f"6. PySpark end to end, {shape} shape, {MODES[mode]}",
                        f"rows/s >= {target:g}x {MODES[base]}", f"{value:.2f}x {MODES[base]}"
                        if value < 10 else f"{value:.1f}x {MODES[base]}", value,
                        value >= target and agree)
    if shape == "50k" and "a2" in results and "d" in results:  # latency, not throughput
        ours, native = (summarize(results[m]["batch_seconds"])["p50"] for m in ("a2", "d"))
        value = ratio(ours, native)
        report.goal(f"6. PySpark end to end, 50k shape, {MODES['a2']}",
                    f"batch p50 <= 1x {MODES['d']}'s",
                    f"{ours:.2f} s vs {native:.2f} s ({value:.2f}x)", value,
                    value <= 1.0 and agree)


def tabulate_switch(report: Report, results: dict[str, dict[str, Any]],
                    rates: dict[str, float], agree: bool, shape: str) -> None:
    """The same PySpark processor on Spark's own operator and through the switch."""
    rows = []
    for switched, spark_run in SWITCH_PAIRS:
        if switched not in results or spark_run not in results:
            continue
        ours, theirs = (summarize(results[m]["batch_seconds"])["p50"]
                        for m in (switched, spark_run))
        value = ratio(rates[switched], rates[spark_run])
        rows.append([MODES[spark_run], MODES[switched], rates[spark_run], rates[switched],
                     theirs, ours, value, ratio(theirs, ours)])
        if switched in SWITCH_GOALS:
            report.goal(f"6. PySpark end to end, {shape} shape, {MODES[switched]}",
                        f"rows/s >= {SWITCH_GOAL:g}x {MODES[spark_run]}",
                        f"{value:.1f}x {MODES[spark_run]}", value,
                        value >= SWITCH_GOAL and agree)
    if rows:
        report.table("The same PySpark processor on Spark's own operator and through the "
                      "switch (rows/s over each run's batches; batch p50)",
                      ["Spark's own", "the switch", "Spark rows/s", "switch rows/s",
                       "Spark batch p50 s", "switch batch p50 s", "rows/s ratio",
                       "batch p50 ratio"], rows)


BOTH_SHAPES = (  # (mode, its rows/s compared with this mode's, at least)
    ("a2", "d", 1.5),  # the vectorized API leaves Spark's own JVM aggregation behind
    ("a", "d", 1.0),  # the per-key API at least matches it
    ("a", "b", 20.0),  # the per-key API against PySpark's own per-key stateful API
)
GOALS = {"50k": BOTH_SHAPES,
         "1e6": (*BOTH_SHAPES, ("a2", "e", 0.5))}  # state costs at most half the floor's rate
SWITCH_GOAL = 10.0  # the switch against Spark's own operator, the same processor
SWITCH_GOALS = ("s", "s2")  # the value-state count in pandas and in Rows; (s'') is information


def _as_dict(progress: Any) -> dict[str, Any]:
    """PySpark returns progress objects (4.x) or dicts (3.x); read both as dicts."""
    if isinstance(progress, dict):
        return progress
    text = progress.json if isinstance(progress.json, str) else progress.json()
    data: dict[str, Any] = json.loads(text)
    return data


if __name__ == "__main__":
    main()
