"""Benchmark 6: the same keyed running count end to end in PySpark (local[2]), four ways.

(a)  this library, per-key API (StatefulProcessor) through foreachBatch;
(a') this library, vectorized API (VectorizedStatefulProcessor);
(b)  PySpark's applyInPandasWithState and
(c)  PySpark's transformWithStateInPandas, both on Spark's RocksDB state store with changelog
     checkpointing on and checkpoint format V2.
Input: parquet files of string keys, one file per trigger, `availableNow`, 4 state partitions.
Every variant's sink computes (output rows, sum of counts) per batch, so the four runs are
checked against each other batch by batch. After the run each query is restarted on its
checkpoint with one more file and cold state (the executors' loaded stores are dropped), and
the time to finish that batch is the recovery time.

    python -m benchmarks.spark_e2e [--quick] [--modes a,a2,b,c]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.harness import Report, parse_args, profiled, ratio, scratch, summarize
from benchmarks.plots import bar_plot
from benchmarks.spark_jobs import (
    INPUT_SCHEMA,
    OUTPUT_SCHEMA,
    STATE_SCHEMA,
    PerKeyCount,
    TwsCount,
    VectorizedCount,
    group_state_count,
)

NAME = "spark_e2e"
FULL: dict[str, Any] = {"files": 20, "rows_per_file": 50_000, "keys": 100_000, "partitions": 4,
                        "warmup": True}
QUICK: dict[str, Any] = {"files": 2, "rows_per_file": 1_000, "keys": 500, "partitions": 4,
                         "warmup": False}
MODES = {"a": "(a) dstl per-key", "a2": "(a') dstl vectorized",
         "b": "(b) applyInPandasWithState", "c": "(c) transformWithStateInPandas"}
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SPARK_STATE_CONF = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
}
Checksums = dict[int, tuple[int, int]]


def make_inputs(directory: Path, plan: dict[str, Any], seed: int) -> list[Path]:
    """`files` + 1 parquet files (the last one is for the restart), names in batch order."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True)
    paths = []
    base = time.time() - 3600
    for index in range(plan["files"] + 1):
        users = rng.integers(0, plan["keys"], plan["rows_per_file"])
        frame = pd.DataFrame({"user": [f"user-{u}" for u in users],
                              "v": np.arange(plan["rows_per_file"], dtype=np.int64)})
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

        from pyspark_dstl.backend.spark import stateful

        source = (self.spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
                  .parquet(str(self.inputs)))
        sink = checksum_sink(self.outputs)
        if self.mode in ("a", "a2"):
            processor = PerKeyCount() if self.mode == "a" else VectorizedCount()
            self.stream = (stateful(source).group_by("user")
                           .process(processor, OUTPUT_SCHEMA, checkpoint=str(self.work / "dstl"),
                                    partitions=self.plan["partitions"],
                                    conf={"spark.dstl.stateStore.localDir": str(local_dir)})
                           .foreach_batch(sink))
            return self.stream.start(trigger={"availableNow": True},
                                     engine_checkpoint=str(self.work / "engine"))
        grouped = source.groupBy("user")
        if self.mode == "b":
            frame = grouped.applyInPandasWithState(group_state_count, OUTPUT_SCHEMA, STATE_SCHEMA,
                                                   "Update", GroupStateTimeout.NoTimeout)
        else:
            frame = grouped.transformWithStateInPandas(
                statefulProcessor=TwsCount(), outputStructType=OUTPUT_SCHEMA,
                outputMode="Update", timeMode="None")
        return (frame.writeStream.foreachBatch(sink).outputMode("update")
                .option("checkpointLocation", str(self.work / "engine"))
                .trigger(availableNow=True).start())

    def run(self, local_dir: Path) -> dict[str, Any]:
        began = time.perf_counter()
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
        if self.mode in ("a", "a2"):  # this library reports the slowest task's commit
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


def run_all(spark: Any, args: argparse.Namespace, plan: dict[str, Any], modes: list[str],
            work: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Checksums], list[str]]:
    files = make_inputs(work / "inputs", plan, args.seed)
    if plan["warmup"]:
        warm_up(spark, modes, plan, work, args.seed + 1)
    results: dict[str, dict[str, Any]] = {}
    checks: dict[str, Checksums] = {}
    notes: list[str] = []
    for mode in modes:
        run = Run(spark, mode, work / mode, plan)
        run.inputs.mkdir(parents=True)
        for path in files[:-1]:
            os.link(path, run.inputs / path.name)
        result = run.run(work / mode / "local-1")
        print(f"  {MODES[mode]}: {result['rows'] / result['wall_seconds']:,.0f} rows/s, "
              f"{result['batches']} batches in {result['wall_seconds']:.1f} s", flush=True)
        run.add_restart_file(files[-1])
        if mode in ("b", "c"):
            notes.append(f"{MODES[mode]}: " + drop_loaded_state(spark))
        else:
            notes.append(f"{MODES[mode]}: restarted with a fresh local directory, so the "
                         f"executors restore the state from the checkpoint")
        restart = run.run(work / mode / "local-2")  # a fresh local directory: cold state
        result["recovery_seconds"] = restart["wall_seconds"]
        result["recovery_batch_seconds"] = restart["first_batch_seconds"]
        print(f"  {MODES[mode]}: restart + one batch in {restart['wall_seconds']:.1f} s",
              flush=True)
        results[mode] = result
        checks[mode] = run.outputs
    return results, checks, notes


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or NAME, argv, [
        (["--modes"], {"default": ",".join(MODES), "help": "comma-separated: a, a2, b, c"}),
        (["--files"], {"type": int, "default": None}),
    ])
    plan = dict(QUICK if args.quick else FULL)
    if args.files:
        plan["files"] = args.files
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise SystemExit(f"unknown modes {unknown}; choose from {list(MODES)}")
    from tests.support.spark import build_session

    report = Report(NAME, args, {**plan, "modes": {m: MODES[m] for m in modes},
                                 "master": "local[2]", "trigger": "availableNow",
                                 "maxFilesPerTrigger": 1, "spark_state_conf": SPARK_STATE_CONF})
    with scratch(args, "spark") as work:
        spark = build_session(master="local[2]", app_name="pyspark-dstl-bench",
                              extra={**SPARK_STATE_CONF,
                                     "spark.sql.shuffle.partitions": str(plan["partitions"])})
        try:
            with profiled(args):
                results, checks, notes = run_all(spark, args, plan, modes, work)
        finally:
            spark.stop()
    for note in notes:
        report.note(note)
    agree = check_outputs(report, checks)
    tabulate(report, results, plan, agree)
    report.put("samples", results)
    report.put("checksums", {m: {str(b): list(v) for b, v in c.items()} for m, c in checks.items()})
    bar_plot(report, [MODES[m] for m in results], {"rows/s": [
        results[m]["rows"] / results[m]["wall_seconds"] for m in results]},
        f"Keyed running count, {plan['files']} x {plan['rows_per_file']:,} rows, "
        f"{plan['keys']:,} keys, local[2]", "input rows per second")
    report.save()


def check_outputs(report: Report, checks: dict[str, Checksums]) -> bool:
    """Every variant must emit the same (rows, sum of counts) in every batch."""
    reference = next(iter(checks.values()), {})
    agree = all(c == reference for c in checks.values())
    report.note("outputs of all variants agree batch by batch" if agree else
                "OUTPUTS DIFFER between variants: " + json.dumps(
                    {m: {str(b): v for b, v in c.items()} for m, c in checks.items()}))
    return agree


def tabulate(report: Report, results: dict[str, dict[str, Any]], plan: dict[str, Any],
             agree: bool) -> None:
    rows = []
    base = results.get("b")
    for mode, r in results.items():
        batches = summarize(r["batch_seconds"])
        commits = summarize(r["commit_seconds"])
        rate = r["rows"] / r["wall_seconds"]
        rows.append([MODES[mode], r["rows"], r["wall_seconds"], rate, batches["p50"],
                     batches["p99"], commits["p50"] * 1000, commits["p99"] * 1000,
                     r["recovery_seconds"],
                     ratio(rate, base["rows"] / base["wall_seconds"]) if base else float("nan")])
    report.table(f"Keyed running count in PySpark local[2]: {plan['files']} files x "
                 f"{plan['rows_per_file']:,} rows, {plan['keys']:,} keys, "
                 f"{plan['partitions']} state partitions",
                 ["variant", "rows", "wall s", "rows/s", "batch p50 s", "batch p99 s",
                  "commit p50 ms", "commit p99 ms", "restart s", "rows/s vs (b)"], rows)
    if base is None:
        return
    base_rate = base["rows"] / base["wall_seconds"]
    for mode, target in (("a", 10.0), ("a2", 10.0)):
        if mode not in results:
            continue
        value = ratio(results[mode]["rows"] / results[mode]["wall_seconds"], base_rate)
        need = ("(a') > (a)" if mode == "a2" else "")
        met = value >= target and agree
        if mode == "a2" and "a" in results:
            a_rate = results["a"]["rows"] / results["a"]["wall_seconds"]
            met = met and results["a2"]["rows"] / results["a2"]["wall_seconds"] > a_rate
        report.goal(f"6. PySpark end to end {MODES[mode]}",
                    f"rows/s >= 10x (b) applyInPandasWithState {need}".strip(),
                    f"{value:.1f}x (b)", value, met)


def _as_dict(progress: Any) -> dict[str, Any]:
    """PySpark returns progress objects (4.x) or dicts (3.x); read both as dicts."""
    if isinstance(progress, dict):
        return progress
    text = progress.json if isinstance(progress.json, str) else progress.json()
    data: dict[str, Any] = json.loads(text)
    return data


if __name__ == "__main__":
    main()
