"""Benchmark 7: event-time timers in PySpark (local[2]), 1% of the keys' timers due per batch.

Every key holds one event-time timer and one value: batch 0 brings one row per key (event
times spread over SLOTS steps of STEP_MS) and each key registers a timer TIMEOUT_MS after its
event time. Every later batch brings one row of a clock key whose event time moves the
watermark by one step, so the timers of one slot (1% of the keys with 100 slots) fall due in
each batch; a fired timer emits (user, expiry, seen) and clears the key's value. The last
file repeats the previous clock time, so the watermark stops and no trailing batch runs.

Contenders, one after the other on the same files and the same session:
(a)  this library's vectorized API (handle_expired_timers, register_timers, bulk state),
(a') its per-key API (handle_expired_timer, register_timer),
(c)  PySpark's transformWithStateInPandas (StatefulProcessor.handleExpiredTimer) on Spark's
     RocksDB state store with changelog checkpointing and checkpoint format V2.
The watermark comes from df.withWatermark on the same input for all. Batch durations are the
engine's (query progress, triggerExecution); every batch's output is checked against the
model (exactly the keys of the slot, with their expiry and value), so the contenders agree
batch by batch.

    python -m benchmarks.spark_timers [--quick] [--modes vectorized,per_key,tws]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

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
from benchmarks.spark_e2e import SPARK_STATE_CONF, _as_dict
from benchmarks.spark_timer_jobs import (
    INPUT_SCHEMA,
    OUTPUT_SCHEMA,
    TIMEOUT_MS,
    PerKeyTimeout,
    TwsTimeout,
    VectorizedTimeout,
)
from benchmarks.timer_task import PHASES, breakdown

NAME = "spark_timers"
FULL: dict[str, Any] = {"keys": 1_000_000, "slots": 100, "fire_batches": 10, "idle_batches": 5,
                        "partitions": 4, "in_process_batches": 100, "warmup": True}
QUICK: dict[str, Any] = {"keys": 2_000, "slots": 100, "fire_batches": 3, "idle_batches": 1,
                         "partitions": 2, "in_process_batches": 3, "warmup": False}
MODES = {"vectorized": "(a) dstl vectorized", "per_key": "(a') dstl per-key",
         "tws": "(c) transformWithStateInPandas"}
BASELINE = "tws"
START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z, the first slot's event time
STEP_MS = 1_000
CLOCK_KEY = "~clock"  # not a key of the workload: its rows only carry event time
TASK_STATS = ("load_seconds", "process_seconds", "commit_seconds", "task_seconds",
              "timers_fired")


class Timeline:
    """Event times and watermarks of the workload (all in epoch milliseconds).

    Key k sits in slot s(k) with event time START + s * STEP and its timer at that + TIMEOUT.
    The clock row of file i has event time CLOCK_0 + i * STEP, so batch b > 0 fires with the
    watermark CLOCK_0 + (b - 1) * STEP - DELAY = START + TIMEOUT + (b - 0.5) * STEP: half a step
    past slot b - 1's timers and half a step before slot b's, whether a timer fires at
    expiry <= watermark or < watermark."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.delay_ms = slots * STEP_MS - TIMEOUT_MS  # clock 0 >= every slot's event time
        self.clock_0_ms = START_MS + TIMEOUT_MS + self.delay_ms + STEP_MS // 2

    def clock_ms(self, file_index: int, fire_batches: int) -> int:
        """The clock row's event time in file `file_index`; the last file repeats the one
        before it, so the watermark stays where batch `fire_batches` needs it."""
        return self.clock_0_ms + min(file_index, fire_batches - 1) * STEP_MS

    def watermark_ms(self, batch_id: int, fire_batches: int) -> int:
        """The watermark batch `batch_id` fires timers with (0 in the first batch)."""
        if batch_id == 0:
            return 0
        return self.clock_ms(batch_id - 1, fire_batches) - self.delay_ms

    def event_ms(self, slot: np.ndarray) -> np.ndarray:
        return START_MS + slot.astype(np.int64) * STEP_MS

    @property
    def delay(self) -> str:
        return f"{self.delay_ms // 1000} seconds"


class Workload:
    """Keys, their slots, the input files and the output every batch must have."""

    def __init__(self, plan: dict[str, Any], seed: int) -> None:
        if plan["fire_batches"] > plan["slots"]:
            raise SystemExit(f"--fire-batches {plan['fire_batches']} is more than the "
                             f"{plan['slots']} slots")
        self.plan = plan
        self.timeline = Timeline(plan["slots"])
        rng = np.random.default_rng(seed)
        keys = plan["keys"]
        self.users = np.array([f"key-{k:07d}" for k in range(keys)], dtype=object)
        self.slot = np.arange(keys, dtype=np.int64) % plan["slots"]
        rng.shuffle(self.slot)  # exactly keys / slots per slot, spread over the key range
        self.order = rng.permutation(keys)  # rows of the first file in no particular order

    def file_table(self, index: int) -> pa.Table:
        """File `index`: the clock row, after one row per key in file 0."""
        clock = self.timeline.clock_ms(index, self.plan["fire_batches"])
        users, times, armed = [CLOCK_KEY], [clock], [False]
        if index == 0:
            users = list(self.users[self.order]) + users
            times = list(self.timeline.event_ms(self.slot[self.order])) + times
            armed = [True] * len(self.order) + armed
        return pa.table({"user": pa.array(users, pa.string()),
                         "ts": pa.array(np.asarray(times, dtype=np.int64) * 1000,
                                        pa.timestamp("us", tz="UTC")),
                         "armed": pa.array(armed, pa.bool_())})

    @property
    def batches(self) -> int:
        """Batches the input makes: registration, firing batches, idle batches."""
        return 1 + self.plan["fire_batches"] + self.plan.get("idle_batches", 0)

    def write(self, directory: Path) -> list[Path]:
        """One file per batch, names and modification times in batch order."""
        directory.mkdir(parents=True)
        paths = []
        base = time.time() - 3600
        for index in range(self.batches):
            path = directory / f"part-{index:05d}.parquet"
            pq.write_table(self.file_table(index), path)
            # the file source orders files by modification time and breaks ties arbitrarily
            os.utime(path, (base + index, base + index))
            paths.append(path)
        return paths

    def watermark_ms(self, batch_id: int) -> int:
        return self.timeline.watermark_ms(batch_id, self.plan["fire_batches"])

    def expected(self, batch_id: int) -> pa.Table:
        """What batch `batch_id` must emit, sorted by user: slot batch_id - 1's keys."""
        if batch_id == 0 or batch_id > self.plan["fire_batches"]:
            return _sorted(pa.table({"user": pa.array([], pa.string()),
                                     "expiry": pa.array([], pa.int64()),
                                     "seen": pa.array([], pa.int64())}))
        chosen = np.flatnonzero(self.slot == batch_id - 1)
        seen = self.timeline.event_ms(self.slot[chosen])
        return _sorted(pa.table({"user": pa.array(list(self.users[chosen]), pa.string()),
                                 "expiry": pa.array(seen + TIMEOUT_MS, pa.int64()),
                                 "seen": pa.array(seen, pa.int64())}))


def _sorted(table: pa.Table) -> pa.Table:
    return table.select(["user", "expiry", "seen"]).sort_by("user")


def digest(table: pa.Table) -> str:
    """A short fingerprint of a sorted output, kept in the JSON for each batch."""
    hasher = hashlib.sha256()
    for name in ("user", "expiry", "seen"):
        hasher.update(json.dumps(table.column(name).to_pylist()).encode())
    return hasher.hexdigest()[:16]


def collecting_sink(outputs: dict[int, pa.Table]) -> Callable[[Any, int], None]:
    """One action per batch that brings every output row to the driver (checked later)."""

    def sink(df: Any, batch_id: int) -> None:
        outputs[batch_id] = df.toArrow()

    return sink


class BatchProfiler:
    """pyinstrument over this library's foreachBatch function, firing batches only: it runs
    on a py4j callback thread, which the profile of the whole run (--profile) does not see."""

    def __init__(self) -> None:
        from pyinstrument import Profiler

        self.profiler = Profiler(interval=0.001, async_mode="disabled")

    def wrap(self, function: Callable[[Any, int], None]) -> Callable[[Any, int], None]:
        def profiled_batch(df: Any, batch_id: int) -> None:
            if batch_id == 0:
                return function(df, batch_id)
            self.profiler.start()  # sessions of successive batches are combined
            try:
                return function(df, batch_id)
            finally:
                self.profiler.stop()

        return profiled_batch

    def save(self, path: Path) -> None:
        path.write_text(self.profiler.output_html())
        print(self.profiler.output_text(unicode=False, color=False, show_all=False)[:8000])
        print(f"profile of the firing batches' foreachBatch written to {path}", flush=True)


class Run:
    """One contender on its own copy of the input and its own checkpoints."""

    def __init__(self, spark: Any, mode: str, work: Path, plan: dict[str, Any],
                 timeline: Timeline, profile: str | None = None) -> None:
        self.spark = spark
        self.mode = mode
        self.work = work
        self.plan = plan
        self.timeline = timeline
        self.inputs = work / "in"
        self.outputs: dict[int, pa.Table] = {}
        self.stream: Any = None
        self.profile = profile
        self.batch_profiler: BatchProfiler | None = None
        self.task_stats: dict[int, list[dict[str, float]]] = {}

    def source(self) -> Any:
        return (self.spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
                .parquet(str(self.inputs)).withWatermark("ts", self.timeline.delay))

    def start(self) -> Any:
        from pyspark_dstl.spark import stateful

        sink = collecting_sink(self.outputs)
        if self.mode != BASELINE:
            processor = VectorizedTimeout() if self.mode == "vectorized" else PerKeyTimeout()
            self.stream = (stateful(self.source()).group_by("user")
                           .process(processor, OUTPUT_SCHEMA,
                                    checkpoint_location=str(self.work / "dstl"),
                                    partitions=self.plan["partitions"], time_mode="event_time",
                                    settings={"spark.dstl.stateStore.localDir":
                                              str(self.work / "local")})
                           .foreach_batch(sink))
            self._record_task_stats()
            if self.profile:  # start() hands Spark self.stream.run_batch: profile that
                self.batch_profiler = BatchProfiler()
                self.stream.run_batch = self.batch_profiler.wrap(self.stream.run_batch)
            return self.stream.start(trigger={"availableNow": True},
                                     engine_checkpoint=str(self.work / "engine"))
        frame = self.source().groupBy("user").transformWithStateInPandas(
            statefulProcessor=TwsTimeout(), outputStructType=OUTPUT_SCHEMA,
            outputMode="Update", timeMode="EventTime")
        return (frame.writeStream.foreachBatch(sink).outputMode("update")
                .option("checkpointLocation", str(self.work / "engine"))
                .trigger(availableNow=True).start())

    def _record_task_stats(self) -> None:
        """Keep the statistics every task reports (time inside the Python worker), which the
        batch progress only summarizes: wrap the operator's execute()."""
        operator = self.stream.operator
        execute = operator.execute

        def recording_execute(df: Any, batch_id: int, base: Any = None) -> Any:
            result = execute(df, batch_id, base)
            self.task_stats[batch_id] = [
                {**{k: stats[k] for k in TASK_STATS},
                 "load_kind": stats["store"].get("load_kind"),
                 "store_load_seconds": stats["store"].get("load_seconds")}
                for stats in result.stats.values()]
            return result

        operator.execute = recording_execute

    def run(self) -> dict[str, Any]:
        load_before = os.getloadavg()[0]
        began = time.perf_counter()
        with own_python_workers(self.spark, self.mode):
            query = self.start()
            query.awaitTermination()
        wall = time.perf_counter() - began
        load = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        error = query.exception()
        if error is not None:
            raise RuntimeError(f"{MODES[self.mode]} failed: {error}")
        if self.batch_profiler is not None and self.profile:
            stem = Path(self.profile)
            self.batch_profiler.save(stem.with_name(f"{stem.stem}-{self.mode}-batches.html"))
        batches = {}
        for progress in map(_as_dict, query.recentProgress):
            durations = progress.get("durationMs") or {}
            operators = progress.get("stateOperators") or [{}]
            batches[int(progress["batchId"])] = {
                "seconds": durations.get("triggerExecution", 0) / 1000,
                "add_batch_seconds": durations.get("addBatch", 0) / 1000,
                "input_rows": int(progress.get("numInputRows", 0)),
                "engine_ms": {k: v for k, v in durations.items()
                              if k not in ("triggerExecution", "addBatch")},
                "watermark": (progress.get("eventTime") or {}).get("watermark"),
                "spark_operator": {k: v for k, v in operators[0].items()
                                   if isinstance(v, int | float | dict)},
            }
        for batch_id, table in self.outputs.items():
            if batch_id in batches:
                batches[batch_id]["output_rows"] = table.num_rows
        if self.stream is not None:
            for p in self.stream.progress:
                entry = batches.setdefault(p.batch_id, {})
                entry.update(timers_fired=p.timers_fired, stage_seconds=p.stage_seconds,
                             sink_seconds=p.sink_seconds, commit_log_seconds=p.commit_log_seconds,
                             max_task_commit_seconds=p.max_task_commit_seconds,
                             dstl_watermark_ms=p.watermark_ms)
                tasks = self.task_stats.get(p.batch_id, [])
                if tasks:
                    entry.update(
                        tasks=tasks,
                        task_max_seconds=max(t["task_seconds"] for t in tasks),
                        task_sum_seconds=sum(t["task_seconds"] for t in tasks),
                        task_process_sum_seconds=sum(t["process_seconds"] for t in tasks))
        return {"wall_seconds": wall, "load_average": load,
                "batches": {str(b): batches[b] for b in sorted(batches)}}


def check(workload: Workload, run: Run) -> tuple[list[str], dict[str, str]]:
    """Every batch's output against the model; (problems, digest per batch)."""
    problems: list[str] = []
    digests: dict[str, str] = {}
    for batch_id in sorted(set(run.outputs) | set(range(workload.batches))):
        table = run.outputs.get(batch_id)
        if table is None:
            problems.append(f"batch {batch_id}: no output (the batch did not run)")
            continue
        got = _sorted(table)
        want = workload.expected(batch_id)
        digests[str(batch_id)] = digest(got)
        if not got.equals(want):
            problems.append(f"batch {batch_id}: {got.num_rows} rows, expected {want.num_rows} "
                            f"(the keys of slot {batch_id - 1}); first rows "
                            f"{got.slice(0, 3).to_pylist()} vs {want.slice(0, 3).to_pylist()}")
    return problems, digests


def warm_up(spark: Any, modes: list[str], work: Path, seed: int) -> None:
    """One tiny run of every contender first: JIT, Python workers and imports warm for all."""
    plan = {"keys": 400, "slots": 100, "fire_batches": 2, "idle_batches": 1, "partitions": 4}
    workload = Workload(plan, seed)
    for mode in modes:
        warm = Run(spark, mode, work / f"warm-{mode}", plan, workload.timeline)
        workload.write(warm.inputs)
        warm.run()
    print("  warm-up done", flush=True)


def run_all(spark: Any, args: argparse.Namespace, plan: dict[str, Any], modes: list[str],
            work: Path) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, str]], list[str]]:
    workload = Workload(plan, args.seed)
    files = workload.write(work / "inputs")
    if plan["warmup"]:
        warm_up(spark, modes, work, args.seed + 1)
    results: dict[str, dict[str, Any]] = {}
    digests: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    for mode in modes:
        run = Run(spark, mode, work / mode, plan, workload.timeline, args.profile)
        run.inputs.mkdir(parents=True)
        for path in files:
            os.link(path, run.inputs / path.name)
        result = run.run()
        found, digests[mode] = check(workload, run)
        problems += [f"{MODES[mode]}: {p}" for p in found]
        results[mode] = summarize_run(result, plan)
        r = results[mode]
        print(f"  {MODES[mode]}: registration {r['register_seconds']:.1f} s, "
              f"{r['timers_fired']:,} timers fired in {r['fire_seconds']:.1f} s "
              f"({r['timers_per_second']:,.0f} timers/s), wall {r['wall_seconds']:.1f} s",
              flush=True)
        run.outputs.clear()
    return results, digests, problems


def summarize_run(result: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """Batch 0 registers, batches 1..fire_batches fire, the idle batches after them fire
    nothing (their duration is the contender's fixed cost per batch); any later batch is
    reported."""
    batches = result["batches"]
    last_firing = plan["fire_batches"]
    last = last_firing + plan["idle_batches"]
    firing = [batches[str(b)] for b in range(1, last_firing + 1) if str(b) in batches]
    idle = [batches[str(b)] for b in range(last_firing + 1, last + 1) if str(b) in batches]
    fired = sum(int(b.get("output_rows", 0)) for b in firing)
    seconds = [float(b["seconds"]) for b in firing]
    register = batches.get("0", {})
    return {
        **result,
        "register_seconds": float(register.get("seconds", float("nan"))),
        "register_rows": int(register.get("input_rows", 0)),
        "firing_batches": len(firing),
        "idle_batches": len(idle),
        "idle_batch_seconds": [float(b["seconds"]) for b in idle],
        "extra_batches": sorted(int(b) for b in batches if int(b) > last),
        "timers_fired": fired,
        "fire_seconds": sum(seconds),
        "fire_batch_seconds": seconds,
        "timers_per_second": ratio(fired, sum(seconds)),
    }


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or NAME, argv, [
        (["--modes"], {"default": ",".join(MODES),
                       "help": "comma-separated: " + ", ".join(MODES)}),
        (["--keys"], {"type": int, "default": None}),
        (["--fire-batches"], {"type": int, "default": None,
                              "help": "batches after the first (each fires one slot)"}),
        (["--idle-batches"], {"type": int, "default": None,
                              "help": "batches after those that fire nothing (fixed cost)"}),
    ])
    plan = plan_of(args, QUICK, FULL, ("keys", "fire_batches"))
    if args.idle_batches is not None:  # 0 is a choice here
        plan["idle_batches"] = args.idle_batches
    modes = chosen_modes(args.modes, MODES)
    from tests.support.spark import build_session

    timeline = Timeline(plan["slots"])
    report = Report(NAME, args, {
        **plan, "modes": {m: MODES[m] for m in modes}, "master": "local[2]",
        "trigger": "availableNow", "maxFilesPerTrigger": 1, "step_ms": STEP_MS,
        "timeout_ms": TIMEOUT_MS, "watermark_delay": timeline.delay,
        "spark_state_conf": SPARK_STATE_CONF})
    with scratch(args, "timers") as work:
        spark = build_session(master="local[2]", app_name="pyspark-dstl-bench",
                              spark_defaults=True,
                              extra={**SPARK_STATE_CONF,
                                     "spark.sql.shuffle.partitions": str(plan["partitions"]),
                                     "spark.sql.streaming.numRecentProgressUpdates": "1000"})
        try:
            with profiled(args):
                results, digests, problems = run_all(spark, args, plan, modes, work)
                share = Workload({**plan, "keys": plan["keys"] // plan["partitions"],
                                  "fire_batches": plan["in_process_batches"]}, args.seed)
                inside = breakdown(share, work / "in-process",
                                   [m for m in modes if m != BASELINE],
                                   plan["in_process_batches"])
        finally:
            spark.stop()
    agree = not problems and len({json.dumps(d, sort_keys=True) for d in digests.values()}) <= 1
    for problem in problems:
        report.note("OUTPUT DIFFERS FROM THE MODEL: " + problem)
    if agree:
        report.note(f"every contender emitted exactly the model's rows in every batch "
                    f"({plan['fire_batches']} firing batches, each the keys of one slot with "
                    f"their expiry and value)")
    for mode, r in results.items():
        if r["extra_batches"]:
            report.note(f"{MODES[mode]}: ran batches {r['extra_batches']} after the last "
                        f"file (not counted)")
    tabulate(report, results, plan, agree)
    tabulate_batch_parts(report, results)
    tabulate_task(report, inside, share)
    report.put("samples", results)
    report.put("in_process", inside)
    report.put("digests", digests)
    bar_plot(report, [MODES[m] for m in results], {"timers/s": [
        results[m]["timers_per_second"] for m in results]},
        f"Event-time timers fired per second, {plan['keys']:,} keys, 1/{plan['slots']} due "
        f"per batch, local[2]", "timers fired per second (one output row each)")
    report.save()
    if problems:
        raise SystemExit("outputs differ from the model; see the notes above")


def tabulate(report: Report, results: dict[str, dict[str, Any]], plan: dict[str, Any],
             agree: bool) -> None:
    base = results.get(BASELINE)
    rows = []
    for mode, r in results.items():
        batches = summarize(r["fire_batch_seconds"])
        per_batch = r["timers_fired"] / max(1, r["firing_batches"])
        per_timer_us = ratio(r["fire_seconds"], r["timers_fired"]) * 1e6
        idle = summarize(r["idle_batch_seconds"]).get("p50", float("nan"))
        rows.append([MODES[mode], r["register_seconds"],
                     ratio(r["register_rows"], r["register_seconds"]),
                     r["firing_batches"], per_batch,
                     batches.get("p50", float("nan")), batches.get("p90", float("nan")), idle,
                     per_timer_us,
                     ratio(batches.get("p50", float("nan")) - idle, per_batch) * 1e6,
                     r["timers_per_second"],
                     ratio(r["timers_per_second"], base["timers_per_second"])
                     if base else float("nan"),
                     f"{r['load_average'][0]:.1f} / {r['load_average'][1]:.1f}"])
    report.table(f"Event-time timers in PySpark local[2]: {plan['keys']:,} keys with one timer "
                 f"each, 1/{plan['slots']} of them due per batch, {plan['partitions']} state "
                 f"partitions",
                 ["variant", "register s", "register rows/s", "firing batches",
                  "timers/batch", "batch p50 s", "batch p90 s", "idle batch p50 s",
                  "us per timer", "us per timer above idle", "timers/s", "timers/s vs (c)",
                  "load avg start / end"], rows)
    if base is None:
        return
    for mode in ("vectorized", "per_key"):
        if mode not in results:
            continue
        value = ratio(results[mode]["timers_per_second"], base["timers_per_second"])
        report.goal(f"7. PySpark timers {MODES[mode]}",
                    "timers fired/s >= 10x (c) transformWithStateInPandas",
                    f"{value:.1f}x (c)", value, value >= 10.0 and agree)


def tabulate_batch_parts(report: Report, results: dict[str, dict[str, Any]]) -> None:
    """Where a batch's time goes, as far as the engine and this library report it, for the
    firing batches and for the idle ones (no timer due)."""
    rows = []
    for mode, r in results.items():
        last_firing = r["firing_batches"]
        kinds = {"firing": range(1, last_firing + 1),
                 "idle": range(last_firing + 1, last_firing + r["idle_batches"] + 1)}
        for kind, chosen in kinds.items():
            picked = [b for key, b in r["batches"].items() if int(key) in chosen]
            operators = [b.get("spark_operator") or {} for b in picked]
            rows.append([MODES[mode], kind, _p50(picked, "seconds"),
                         _p50(picked, "add_batch_seconds"), _p50(picked, "stage_seconds"),
                         _p50(picked, "task_max_seconds"), _p50(picked, "task_sum_seconds"),
                         _p50(picked, "sink_seconds"), _p50(picked, "commit_log_seconds"),
                         _p50(operators, "allUpdatesTimeMs", 1 / 1000),
                         _p50(operators, "commitTimeMs", 1 / 1000)])
    report.table("Parts of a batch (median seconds over the firing batches, and over the idle "
                 "ones where no timer is due): the engine's triggerExecution and addBatch; "
                 "this library's stateful stage, the time its tasks spent in the Python worker "
                 "(slowest task, and all tasks added up), then the sink and the commit-log "
                 "write inside addBatch; Spark's state operator time (added up over its tasks) "
                 "and commit time",
                 ["variant", "batches", "batch", "addBatch", "dstl stage", "dstl task max",
                  "dstl tasks sum", "dstl sink", "dstl commit log", "TWS operator updates",
                  "TWS commit"], rows)


def _p50(batches: list[dict[str, Any]], field: str, scale: float = 1.0) -> float:
    values = [float(b[field]) * scale for b in batches if b.get(field) is not None]
    return float(np.median(values)) if values else float("nan")


def tabulate_task(report: Report, inside: dict[str, list[dict[str, float]]],
                  share: Workload) -> None:
    """The in-process breakdown (benchmarks/timer_task.py): mean per batch of every step, in
    wall time and in the CPU time of the task's thread."""
    if not inside:
        return
    labels = [label for label, _, _ in PHASES]
    headers = ["step"]
    for mode in inside:
        headers += [f"{MODES[mode]} wall ms", "CPU ms", "CPU us/timer"]
    steps = [*labels, "other (runner loop)", "= run_processor", "store commit", "store load",
             "= task"]
    rows = []
    for step in steps:
        row: list[Any] = [step]
        for samples in inside.values():
            wall = float(np.mean([_step_seconds(s, step, labels) for s in samples]))
            cpu = float(np.mean([_step_seconds(s, step, labels, " cpu") for s in samples]))
            timers = float(np.mean([s["timers"] for s in samples]))
            row += [wall * 1000, cpu * 1000, ratio(cpu, timers) * 1e6]
        rows.append(row)
    first = next(iter(inside.values()))
    report.table(f"Inside one firing task, measured in process without Spark: one partition's "
                 f"{share.plan['keys']:,} timers, {first[0]['timers']:,.0f} due per batch, "
                 f"mean over {len(first)} batches", headers, rows)
    tenth = max(1, len(first) // 10)
    growth = ["due-timer scan", "earliest timer + flush", "= run_processor", "store commit"]
    rows = []
    for mode, samples in inside.items():
        for label, part in ((f"1-{tenth}", samples[:tenth]),
                            (f"{len(samples) - tenth + 1}-{len(samples)}", samples[-tenth:])):
            rows.append([MODES[mode], label, *[
                float(np.mean([_step_seconds(s, step, labels, suffix) for s in part])) * 1000
                for step in growth for suffix in (" cpu", "")]])
    report.table("The same task early and late in the run (mean ms per batch, CPU and wall): "
                 "does firing slow down as fired timers pile up as deletions in the index?",
                 ["variant", "batches", *[f"{step} {kind} ms" for step in growth
                                          for kind in ("CPU", "wall")]], rows)


def _step_seconds(sample: dict[str, float], step: str, labels: list[str],
                  suffix: str = "") -> float:
    """One step's seconds in a sample; suffix " cpu" for CPU time."""
    if step == "other (runner loop)":
        return sample["run" + suffix] - sum(sample.get(label + suffix, 0.0) for label in labels)
    if step == "= task":
        return sum(sample[part + suffix] for part in ("load", "run", "commit"))
    parts = {"= run_processor": "run", "store commit": "commit", "store load": "load"}
    return sample.get(parts.get(step, step) + suffix, 0.0)

if __name__ == "__main__":
    main()
