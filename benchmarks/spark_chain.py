"""Benchmark 12: a chained query, transformWithState then a windowed count, in PySpark
(local[2]), on this backend and on Spark's own operators.

The query: a running count per user (transformWithStateInPandas, event time, its output's
`at` named by eventTimeColumnName), then `groupBy(window("at", "10 seconds")).count()` in
append mode, so each batch emits the windows the watermark closed. Contenders, on the same
files in the same session:
(a)  PySpark's own code with the switch on (`pyspark_dstl.install()`): both steps run here,
     two operators of one commit;
(a') the library's builder with its vectorized processor as the first step, then the same
     `group_by(window).count()`;
(b)  PySpark's own operators: transformWithStateInPandas and the streaming aggregation, on
     Spark's RocksDB state store with changelog checkpointing and checkpoint format V2.
Input: parquet files of (user, v, ts), file i with event times in [10 i, 10 i + 10) seconds,
one file per trigger, `availableNow`, watermark delay 5 seconds, 4 state partitions. Every
sink computes (windows, sum of counts) per batch, and the contenders must agree batch by
batch. Each runs once on a tiny input first (JIT, Python workers and imports warm), then
`--rounds` times, round by round across the contenders; the faster round counts.

    python -m benchmarks.spark_chain [--quick] [--modes a,a2,b] [--rounds 1]
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.chain_jobs import FIRST_OUTPUT, INPUT_SCHEMA, TwsNewest, VectorizedNewest
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
from benchmarks.spark_e2e import SPARK_STATE_CONF, Checksums, _as_dict, checksum_sink

NAME = "spark_chain"
FULL: dict[str, Any] = {"files": 8, "rows_per_file": 40_000, "keys": 20_000, "partitions": 4,
                        "warmup": True, "rounds": 1}
QUICK: dict[str, Any] = {"files": 2, "rows_per_file": 500, "keys": 100, "partitions": 2,
                         "warmup": False, "rounds": 1}
MODES = {"a": "(a) dstl switch: PySpark's code, both steps here",
         "a2": "(a') dstl builder: vectorized first step, then the same count",
         "b": "(b) PySpark's own operators"}
DEFAULT_MODES = ("a", "a2", "b")
SECONDS_PER_FILE = 10
WATERMARK = "5 seconds"


def make_inputs(directory: Path, plan: dict[str, Any], seed: int) -> list[Path]:
    """One parquet file per batch, event times of file i in [10 i, 10 i + 10) s."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True)
    base = time.time() - 3600
    paths = []
    for index in range(plan["files"]):
        rows = plan["rows_per_file"]
        users = rng.integers(0, plan["keys"], rows)
        micros = (index * SECONDS_PER_FILE * 1_000_000
                  + rng.integers(0, SECONDS_PER_FILE * 1_000_000, rows))
        frame = pd.DataFrame({"user": [f"user-{u}" for u in users],
                              "v": np.arange(rows, dtype=np.int64),
                              "ts": pd.to_datetime(micros, unit="us", utc=True)})
        path = directory / f"part-{index:05d}.parquet"
        frame.to_parquet(path, index=False, coerce_timestamps="us")
        os.utime(path, (base + index, base + index))  # the file source orders by mtime
        paths.append(path)
    return paths


class Run:
    """One contender on its own input folder and checkpoint."""

    def __init__(self, spark: Any, mode: str, work: Path, plan: dict[str, Any]) -> None:
        self.spark = spark
        self.mode = mode
        self.work = work
        self.plan = plan
        self.inputs = work / "in"
        self.outputs: Checksums = {}
        self.stream: Any = None

    def source(self) -> Any:
        return (self.spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
                .parquet(str(self.inputs)).withWatermark("ts", WATERMARK))

    def start(self) -> Any:
        from pyspark.sql import functions as F

        import pyspark_dstl

        sink = checksum_sink(self.outputs)
        if self.mode == "a2":
            from pyspark_dstl.spark import stateful

            conf = {"spark.dstl.stateStore.localDir": str(self.work / "local"),
                    "spark.dstl.query.logProgress": "false"}
            first = stateful(self.source()).group_by("user").process(
                VectorizedNewest(), FIRST_OUTPUT, checkpoint_location=str(self.work / "dstl"),
                partitions=self.plan["partitions"], settings=conf, time_mode="event_time",
                output_event_time="at")
            self.stream = (first.group_by(F.window("at", "10 seconds")).count()
                           .foreach_batch(sink))
            return self.stream.start(trigger={"availableNow": True},
                                     engine_checkpoint=str(self.work / "engine"))
        if self.mode == "a":
            pyspark_dstl.install()
        try:
            first = self.source().groupBy("user").transformWithStateInPandas(
                statefulProcessor=TwsNewest(), outputStructType=FIRST_OUTPUT,
                outputMode="Append", timeMode="EventTime", eventTimeColumnName="at")
            counts = first.groupBy(F.window("at", "10 seconds")).count()
            return (counts.writeStream.foreachBatch(sink).outputMode("append")
                    .option("checkpointLocation", str(self.work / "checkpoint"))
                    .trigger(availableNow=True).start())
        finally:
            if self.mode == "a":
                pyspark_dstl.uninstall()

    def run(self) -> dict[str, Any]:
        began = time.perf_counter()
        with own_python_workers(self.spark, self.mode):
            query = self.start()
            query.awaitTermination()
        wall = time.perf_counter() - began
        error = query.exception()
        if error is not None:
            raise RuntimeError(f"{MODES[self.mode]} failed: {error}")
        progress = [_as_dict(p) for p in query.recentProgress]
        durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress
                     if "triggerExecution" in p.get("durationMs", {})]
        rows = sum(int(p.get("numInputRows", 0)) for p in progress)
        return {"wall_seconds": wall, "rows": rows, "batches": len(durations),
                "batch_seconds": durations}


def run_all(spark: Any, plan: dict[str, Any], modes: list[str], work: Path, seed: int
            ) -> tuple[dict[str, dict[str, Any]], dict[str, Checksums]]:
    files = make_inputs(work / "inputs", plan, seed)
    if plan["warmup"]:
        warm_plan = {**plan, "files": 2, "rows_per_file": 200, "keys": 50}
        warm_files = make_inputs(work / "warm-inputs", warm_plan, seed + 1)
        for mode in modes:
            warm = Run(spark, mode, work / f"warm-{mode}", warm_plan)
            warm.inputs.mkdir(parents=True)
            for path in warm_files:
                os.link(path, warm.inputs / path.name)
            warm.run()
        print("  warm-up done", flush=True)
    measured: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    checks: dict[str, Checksums] = {}
    for number in range(plan["rounds"]):
        for mode in modes:
            run = Run(spark, mode, work / mode / f"round-{number}", plan)
            run.inputs.mkdir(parents=True)
            for path in files:
                os.link(path, run.inputs / path.name)
            result = run.run()
            measured[mode].append(result)
            checks.setdefault(mode, dict(run.outputs))
            print(f"  {MODES[mode]} round {number + 1}: "
                  f"{result['rows'] / result['wall_seconds']:,.0f} rows/s, "
                  f"{result['batches']} batches in {result['wall_seconds']:.1f} s", flush=True)
    best = {mode: min(runs, key=lambda r: float(r["wall_seconds"]))
            for mode, runs in measured.items()}
    return best, checks


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or NAME, argv, [
        (["--modes"], {"default": None,
                       "help": f"comma-separated from {', '.join(MODES)} "
                               f"(default {','.join(DEFAULT_MODES)})"}),
        (["--files"], {"type": int, "default": None}),
        (["--rounds"], {"type": int, "default": None}),
    ])
    plan = plan_of(args, QUICK, FULL, ("files", "rounds"))
    modes = chosen_modes(args.modes or ",".join(DEFAULT_MODES), MODES)
    from tests.support.spark import build_session

    report = Report(NAME, args, {**plan, "modes": {m: MODES[m] for m in modes},
                                 "master": "local[2]", "trigger": "availableNow",
                                 "maxFilesPerTrigger": 1, "watermark": WATERMARK,
                                 "window": "10 seconds", "spark_state_conf": SPARK_STATE_CONF})
    with scratch(args, "spark-chain") as work:
        spark = build_session(master="local[2]", app_name="pyspark-dstl-bench-chain",
                              spark_defaults=True,
                              extra={**SPARK_STATE_CONF,
                                     "spark.sql.shuffle.partitions": str(plan["partitions"]),
                                     "spark.dstl.query.logProgress": "false"})
        try:
            with profiled(args):
                results, checks = run_all(spark, plan, modes, work, args.seed)
        finally:
            spark.stop()
    agree = bool(checks) and len({json.dumps(sorted(c.items())) for c in checks.values()}) == 1
    agree = agree and any(n for n, _ in next(iter(checks.values())).values())
    report.note("outputs of all contenders agree batch by batch (windows and their counts)"
                if agree else "OUTPUTS DIFFER between contenders: " + json.dumps(
                    {m: {str(b): v for b, v in c.items()} for m, c in checks.items()}))
    tabulate(report, results, plan, agree)
    report.put("samples", results)
    report.put("checksums", {m: {str(b): list(v) for b, v in c.items()}
                             for m, c in checks.items()})
    bar_plot(report, [MODES[m] for m in results], {"rows/s": [
        results[m]["rows"] / results[m]["wall_seconds"] for m in results]},
        f"transformWithState then a windowed count, {plan['files']} x "
        f"{plan['rows_per_file']:,} rows, {plan['keys']:,} keys, local[2]",
        "input rows per second")
    report.save()


def tabulate(report: Report, results: dict[str, dict[str, Any]], plan: dict[str, Any],
             agree: bool) -> None:
    rates = {m: r["rows"] / r["wall_seconds"] for m, r in results.items()}
    rows = []
    for mode, r in results.items():
        batches = summarize(r["batch_seconds"])
        rows.append([MODES[mode], r["rows"], r["batches"], r["wall_seconds"], rates[mode],
                     batches["p50"], batches["p99"],
                     ratio(rates[mode], rates.get("b", math.nan))])
    report.table(f"transformWithState then a windowed count in PySpark local[2]: "
                 f"{plan['files']} files x {plan['rows_per_file']:,} rows, {plan['keys']:,} "
                 f"keys, {plan['partitions']} state partitions (best of {plan['rounds']})",
                 ["contender", "rows", "batches", "wall s", "rows/s", "batch p50 s",
                  "batch p99 s", "rows/s vs (b)"], rows)
    if "a" in rates and "b" in rates:
        value = ratio(rates["a"], rates["b"])
        report.goal("12. Chained query, the switch", "rows/s >= 1x PySpark's own operators",
                    f"{value:.2f}x", value, value >= 1.0 and agree)


if __name__ == "__main__":
    main()
