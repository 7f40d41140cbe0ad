"""Benchmark 8: output as large as the input, at cluster scale, in PySpark (local[2]).

A stateful map emits every input row with its key's running count (benchmarks/output_jobs.py),
so a batch's output is as large as its input. Three runs over the same parquet files, one file
per trigger, `availableNow`, 4 state partitions, each with the same sink (the batch written as
parquet, overwriting a per-batch directory):

  files    outputMode "files": each task writes its output once, the sink reads those files
  collect  outputMode "collect": every output row travels to the driver as Arrow
  floor    no state at all: the same read and the same sink (a constant count column)

Then the same three on ordinary batches (20 files x 50,000 rows, the size of benchmark 6), where
outputs are small enough to come inline with the meta rows in `files` mode: information on
whether `files` is as fast as `collect` there, which decides the default.

Measured: input rows per second over the whole run, and the driver's memory while it runs
(Python RSS of the driver process and used heap of its JVM, sampled every 0.25 s; in local mode
the executors share that JVM). The written outputs of the stateful runs are checked equal.

    python -m benchmarks.spark_output [--quick] [--modes floor,files,collect] [--files N]
"""

from __future__ import annotations

import argparse
import gc
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.harness import Report, chosen_modes, parse_args, plan_of, profiled, ratio, scratch
from benchmarks.output_jobs import INPUT_SCHEMA, OUTPUT_SCHEMA, RunningCountPerRow
from benchmarks.plots import bar_plot, line_plot
from pyspark_dstl.core.units import MIB

NAME = "spark_output"
FULL: dict[str, Any] = {"files": 10, "rows_per_file": 1_000_000, "keys": 100_000,
                        "partitions": 4, "warmup": True,
                        "small_files": 20, "small_rows_per_file": 50_000, "rounds": 2}
QUICK: dict[str, Any] = {"files": 2, "rows_per_file": 2_000, "keys": 200, "partitions": 4,
                         "warmup": False, "small_files": 1, "small_rows_per_file": 300,
                         "rounds": 1}
MODES = {"floor": "no-state floor", "files": "outputMode files", "collect": "outputMode collect"}
SAMPLE_SECONDS = 0.25


def make_inputs(directory: Path, plan: dict[str, Any], seed: int) -> list[Path]:
    """`files` parquet files of (user, v), names and modification times in batch order."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True)
    names = pa.array([f"user-{k}" for k in range(plan["keys"])])
    base = time.time() - 3600
    paths = []
    for index in range(plan["files"]):
        users = names.take(pa.array(rng.integers(0, plan["keys"], plan["rows_per_file"])))
        start = index * plan["rows_per_file"]
        table = pa.table({"user": users,
                          "v": pa.array(np.arange(start, start + plan["rows_per_file"]))})
        path = directory / f"part-{index:05d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (base + index, base + index))
        paths.append(path)
    return paths


class DriverMemory:
    """Samples the driver's Python RSS and its JVM's used heap on a background thread."""

    def __init__(self, spark: Any) -> None:
        self._runtime = spark._jvm.java.lang.Runtime.getRuntime()
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._stop = threading.Event()
        self.samples: list[tuple[float, int, int]] = []  # (seconds, rss bytes, heap bytes)
        self._thread = threading.Thread(target=self._run, name="driver-memory", daemon=True)
        self._started = 0.0

    def rss(self) -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * self._page

    def heap(self) -> int:
        return int(self._runtime.totalMemory() - self._runtime.freeMemory())

    def _run(self) -> None:
        while True:
            self.samples.append((time.monotonic() - self._started, self.rss(), self.heap()))
            if self._stop.wait(SAMPLE_SECONDS):
                return

    def __enter__(self) -> DriverMemory:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, Any]:
        rss = [s[1] for s in self.samples]
        heap = [s[2] for s in self.samples]
        return {"rss_start": rss[0], "rss_peak": max(rss), "rss_growth": max(rss) - rss[0],
                "heap_start": heap[0], "heap_peak": max(heap),
                "heap_growth": max(heap) - heap[0],
                "rss_mb_series": [round(r / MIB, 1) for r in rss],
                "heap_mb_series": [round(h / MIB, 1) for h in heap]}


def parquet_sink(out: Path, constant_count: bool) -> Any:
    """The sink of every run: the batch as parquet, replacing that batch's directory."""
    from pyspark.sql import functions as F

    def sink(df: Any, batch_id: int) -> None:
        if constant_count:
            df = df.withColumn("count", F.lit(1).cast("long"))
        df.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

    return sink


def run_mode(spark: Any, mode: str, inputs: Path, work: Path, plan: dict[str, Any]
             ) -> dict[str, Any]:
    from pyspark_dstl.spark import stateful

    source = (spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
              .parquet(str(inputs)))
    out = work / "out"
    stream = None
    gc.collect()
    spark._jvm.java.lang.System.gc()
    with DriverMemory(spark) as memory:
        began = time.perf_counter()
        if mode == "floor":
            query = (source.writeStream.foreachBatch(parquet_sink(out, True))
                     .option("checkpointLocation", str(work / "engine"))
                     .trigger(availableNow=True).start())
        else:
            stream = (stateful(source).group_by("user")
                      .process(RunningCountPerRow(), OUTPUT_SCHEMA,
                               checkpoint_location=str(work / "dstl"),
                               partitions=plan["partitions"],
                               settings={"query.outputMode": mode, "query.logProgress": "false",
                                         "stateStore.localDir": str(work / "local")})
                      .foreach_batch(parquet_sink(out, False)))
            query = stream.start(trigger={"availableNow": True},
                                 engine_checkpoint=str(work / "engine"))
        query.awaitTermination()
        wall = time.perf_counter() - began
    if query.exception() is not None:
        raise RuntimeError(f"{MODES[mode]} failed: {query.exception()}")
    rows = plan["files"] * plan["rows_per_file"]
    result: dict[str, Any] = {"wall_seconds": wall, "rows": rows, **memory.summary()}
    if stream is not None:
        progress = stream.progress
        result["batches"] = len(progress)
        result["driver_bytes"] = [p.driver_bytes for p in progress]
        result["output_file_bytes"] = [p.output_file_bytes for p in progress]
        result["stage_seconds"] = [p.stage_seconds for p in progress]
        result["sink_seconds"] = [p.sink_seconds for p in progress]
    from pyspark.sql import functions as F

    written = spark.read.parquet(str(out)).agg(F.count(F.lit(1)).alias("n"),
                                               F.sum("count").alias("s")).collect()[0]
    result["written"] = [int(written["n"]), int(written["s"] or 0)]
    return result


def run_all(spark: Any, args: argparse.Namespace, plan: dict[str, Any], modes: list[str],
            work: Path) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    large = run_size(spark, args, plan, modes, work / "large")
    small_plan = {**plan, "files": plan["small_files"],
                  "rows_per_file": plan["small_rows_per_file"], "warmup": False}
    small = run_size(spark, args, small_plan, modes, work / "small") \
        if small_plan["files"] else {}
    return large, small


def run_size(spark: Any, args: argparse.Namespace, plan: dict[str, Any], modes: list[str],
             work: Path) -> dict[str, dict[str, Any]]:
    files = make_inputs(work / "inputs", plan, args.seed)
    if plan["warmup"]:
        warm = make_inputs(work / "warm-inputs", {**plan, "files": 1, "rows_per_file": 500},
                           args.seed + 1)
        for mode in modes:
            run_mode(spark, mode, warm[0].parent, work / f"warm-{mode}", plan)
        print("  warm-up done", flush=True)
    rounds: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    for number in range(plan["rounds"]):
        order = modes if number % 2 == 0 else modes[::-1]  # alternate against drifting load
        for mode in order:
            result = run_mode(spark, mode, files[0].parent, work / f"{mode}-{number}", plan)
            print(f"  round {number}, {MODES[mode]}, {plan['files']} x "
                  f"{plan['rows_per_file']:,} rows: "
                  f"{result['rows'] / result['wall_seconds']:,.0f} rows/s in "
                  f"{result['wall_seconds']:.1f} s; driver RSS "
                  f"+{result['rss_growth'] / MIB:.0f} MB, heap peak "
                  f"{result['heap_peak'] / MIB:.0f} MB", flush=True)
            rounds[mode].append(result)
    return {mode: best_of(runs) for mode, runs in rounds.items()}


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest round's figures, with the largest memory growth of any round (memory is
    not a race: the worst round counts) and every round's wall time."""
    best = dict(min(runs, key=lambda r: r["wall_seconds"]))
    worst = max(runs, key=lambda r: r["rss_growth"])
    for key in ("rss_start", "rss_peak", "rss_growth", "rss_mb_series"):
        best[key] = worst[key]
    best["heap_peak"] = max(r["heap_peak"] for r in runs)
    best["round_wall_seconds"] = [r["wall_seconds"] for r in runs]
    return best


def default_mode() -> str:
    from pyspark_dstl.spark.query_settings import DstlSettings

    return DstlSettings.from_settings({}).query.output_mode


def inline_bound() -> int:
    from pyspark_dstl.spark.query_settings import DstlSettings

    return DstlSettings.from_settings({}).query.output_inline_bytes


def batch_output_bytes(result: dict[str, Any]) -> int:
    """The largest batch's output as it travelled: files written, or Arrow collected."""
    return max([*result.get("output_file_bytes", []), *result.get("driver_bytes", []), 0])


def tabulate(report: Report, results: dict[str, dict[str, Any]], plan: dict[str, Any],
             goal: bool = True) -> None:
    floor = results.get("floor")
    floor_rate = floor["rows"] / floor["wall_seconds"] if floor else float("nan")
    collect = results.get("collect")
    collect_rate = collect["rows"] / collect["wall_seconds"] if collect else float("nan")
    rows = []
    for mode, r in results.items():
        rate = r["rows"] / r["wall_seconds"]
        rows.append([MODES[mode], r["rows"], r["wall_seconds"], rate, ratio(rate, floor_rate),
                     ratio(rate, collect_rate),
                     max(r.get("driver_bytes", [0])) / MIB, batch_output_bytes(r) / MIB,
                     r["rss_growth"] / MIB, r["heap_start"] / MIB, r["heap_peak"] / MIB])
    report.table(f"Output as large as the input in PySpark local[2]: {plan['files']} files x "
                 f"{plan['rows_per_file']:,} rows, {plan['keys']:,} keys, "
                 f"{plan['partitions']} state partitions, sink writes parquet",
                 ["run", "rows", "wall s", "rows/s", "vs floor", "vs collect",
                  "to driver MB/batch",
                  "output MB/batch", "driver RSS growth MB", "JVM heap start MB",
                  "JVM heap peak MB"], rows)
    default = default_mode()
    if not goal or floor is None or default not in results:
        return
    run = results[default]
    value = ratio(run["rows"] / run["wall_seconds"], floor_rate)
    # flat: the driver's Python memory grows by less than a quarter of one batch's output, and
    # what reaches it per batch stays within the meta rows plus the inline bound
    bound = plan["partitions"] * inline_bound() + 64 * 1024
    flat = run["rss_growth"] < 0.25 * max(batch_output_bytes(run), 1) and \
        max(run.get("driver_bytes", [0])) <= bound
    report.goal(f"8. output as large as input (default outputMode {default})",
                ">= 0.5x the no-state floor's rows/s, driver memory flat",
                f"{value:.2f}x floor, driver RSS +{run['rss_growth'] / MIB:.0f} MB "
                f"({'flat' if flat else 'grows'})", value, value >= 0.5 and flat)


def check_outputs(report: Report, results: dict[str, dict[str, Any]], rows: int) -> None:
    stateful = {mode: r["written"] for mode, r in results.items() if mode != "floor"}
    same = len({tuple(v) for v in stateful.values()}) <= 1
    complete = all(r["written"][0] == rows for r in results.values())
    report.note(("written outputs agree (rows, sum of counts): "
                 if same and complete else "OUTPUTS DIFFER: ")
                + ", ".join(f"{m} {tuple(r['written'])}" for m, r in results.items()))


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or NAME, argv, [
        (["--modes"], {"default": ",".join(MODES),
                       "help": "comma-separated: floor, files, collect"}),
        (["--files"], {"type": int, "default": None}),
        (["--rows-per-file"], {"type": int, "default": None}),
        (["--rounds"], {"type": int, "default": None}),
    ])
    plan = plan_of(args, QUICK, FULL, ("files", "rows_per_file", "rounds"))
    modes = chosen_modes(args.modes, MODES)
    from tests.support.spark import build_session

    report = Report(NAME, args, {**plan, "modes": {m: MODES[m] for m in modes},
                                 "master": "local[2]", "trigger": "availableNow",
                                 "maxFilesPerTrigger": 1, "default_output_mode": default_mode(),
                                 "memory_sample_seconds": SAMPLE_SECONDS})
    with scratch(args, "output") as work:
        spark = build_session(master="local[2]", app_name="pyspark-dstl-bench-output",
                              spark_defaults=True,
                              extra={"spark.sql.shuffle.partitions": str(plan["partitions"])})
        try:
            with profiled(args):
                results, small = run_all(spark, args, plan, modes, work)
        finally:
            spark.stop()
    check_outputs(report, results, plan["files"] * plan["rows_per_file"])
    report.note(f"{plan['rounds']} round(s) per size, the order of the runs reversed every "
                f"round, one driver process; rows/s of the fastest round, memory of the round "
                f"that grew most; JVM heap figures include the executors' work (local mode "
                f"shares the JVM); driver RSS growth is the peak over a run minus the value at "
                f"its start")
    tabulate(report, results, plan)
    if small:
        check_outputs(report, small, plan["small_files"] * plan["small_rows_per_file"])
        tabulate(report, small, {**plan, "files": plan["small_files"],
                                 "rows_per_file": plan["small_rows_per_file"]}, goal=False)
    report.put("samples", results)
    report.put("small_samples", small)
    bar_plot(report, [MODES[m] for m in results], {"rows/s": [
        results[m]["rows"] / results[m]["wall_seconds"] for m in results]},
        f"Output as large as the input: {plan['files']} x {plan['rows_per_file']:,} rows, "
        f"local[2]", "input rows per second")
    longest = max(len(r["rss_mb_series"]) for r in results.values())
    line_plot(report, [i * SAMPLE_SECONDS for i in range(longest)],
              {f"{MODES[m]}: driver Python RSS": r["rss_mb_series"] for m, r in results.items()},
              "Driver memory while each run runs", "seconds since the run started", "MB",
              suffix="_series")
    report.save()


if __name__ == "__main__":
    main()
