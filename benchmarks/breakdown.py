"""Where a batch's milliseconds go, for the keyed running count of benchmark 6 (two shapes) and
the event-time timers of benchmark 7, on this backend and, for the count, Spark's native one.

Each variant runs once per workload (after a warm-up) with benchmark 6's or 7's own workload,
processors and runs; then every batch after the first is split three ways, each from its own
clock, and the table shows the mean milliseconds per batch:
- the engine's progress report (durationMs: offsets, planning, WAL, addBatch, ...);
- Spark's jobs and stages from the monitoring REST API of the driver's UI on 127.0.0.1
  (wall time per job and stage; run time, deserialization and GC summed over the tasks; the
  jobs of this library's stateful stage carry a tag, the others are the sink's);
- this library's own timers: the driver's stage, sink and commit log (BatchProgress) and the
  slowest task's input, store load, processor and commit, the commit split into its final
  flush and the wait for the durable changelog (TaskReport and the store's metrics).
What one clock cannot split from the rest is a row "other (not split)", never an estimate.
The progress branch's cost is the vectorized count with and without it
(spark.dstl.query.observedMetrics=false). Spark's native count shows its state operator's
own timers (summed over tasks) where Spark reports them.

    python -m benchmarks.breakdown [--quick] [--workloads small,large,timers]
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import spark_e2e, spark_timers
from benchmarks.harness import Report, chosen_modes, parse_args, scratch
from benchmarks.spark_ui import BATCH_PROGRESS, UI_SETTINGS, Job, SparkUi, tagged_stages
from pyspark_dstl.spark.driver.progress import PROGRESS_LOGGER

NAME = "breakdown"
WORKLOADS = {"small": "keyed count, 10 files x 50,000 rows, 100,000 keys",
             "large": "keyed count, 10 files x 200,000 rows, 1e6 keys",
             "timers": "event-time timers (benchmark 7)"}
FULL: dict[str, dict[str, Any]] = {
    "small": {"files": 10, "rows_per_file": 50_000, "keys": 100_000, "partitions": 4},
    "large": {"files": 10, "rows_per_file": 200_000, "keys": 1_000_000, "partitions": 4},
    "timers": {"keys": 200_000, "slots": 100, "fire_batches": 6, "idle_batches": 2,
               "partitions": 4},
}
QUICK: dict[str, dict[str, Any]] = {
    "small": {"files": 2, "rows_per_file": 2_000, "keys": 1_000, "partitions": 4},
    "large": {"files": 2, "rows_per_file": 8_000, "keys": 10_000, "partitions": 4},
    "timers": {"keys": 1_000, "slots": 100, "fire_batches": 1, "idle_batches": 1,
               "partitions": 4},
}
COUNT_VARIANTS = ("a", "a2", "a3", "s", "d")  # benchmark 6's modes
TIMER_VARIANTS = ("vectorized", "per_key")  # benchmark 7's modes of this library
ENGINE_PARTS = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "commitOffsets")
NATIVE_STATE = ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs")
TaskStats = dict[tuple[str, int], list[dict[str, Any]]]


# --- one run: the query's batches, each with what every clock says about it -----------------

def measure(ui: SparkUi, query: Any, stream: Any, task_stats: TaskStats) -> list[dict[str, Any]]:
    """Every batch after the first (the first one starts from empty state): the engine's
    durations, Spark's jobs, and this library's driver and task timings."""
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"query failed: {error}")
    jobs = ui.jobs(str(query.runId))
    if stream is not None:
        ours = {p.batch_id: p for p in stream.progress}
        location = stream.operator.location
    else:  # through the switch: what the operator's batches returned
        ours = {batch: p for (_, batch), p in BATCH_PROGRESS.items()}
        location = next((c for c, _ in BATCH_PROGRESS), "")
    batches = []
    for progress in map(spark_e2e._as_dict, query.recentProgress):
        batch_id = int(progress["batchId"])
        if batch_id == 0 or not progress.get("numInputRows"):
            continue
        batch = {"batch_id": batch_id, "durations": progress.get("durationMs") or {},
                 "state_operator": (progress.get("stateOperators") or [{}])[0],
                 "jobs": [job for job in jobs if job.batch_id == batch_id]}
        if batch_id in ours:
            batch["dstl"] = ours[batch_id]
            batch["tasks"] = task_stats.get((location, batch_id), [])
        batches.append(batch)
    return batches


def run_count(spark: Any, ui: SparkUi, mode: str, plan: dict[str, Any], files: list[Path],
              work: Path, task_stats: TaskStats) -> list[dict[str, Any]]:
    """One variant of benchmark 6's keyed running count (its Run, inputs and processors)."""
    run = spark_e2e.Run(spark, mode, work, plan)
    run.inputs.mkdir(parents=True)
    for path in files[:-1]:  # the last file is benchmark 6's restart file
        os.link(path, run.inputs / path.name)
    BATCH_PROGRESS.clear()
    query = run.start(work / "local")
    query.awaitTermination()
    return measure(ui, query, run.stream, task_stats)


def run_timers(spark: Any, ui: SparkUi, mode: str, plan: dict[str, Any], files: list[Path],
               timeline: Any, work: Path, task_stats: TaskStats) -> list[dict[str, Any]]:
    """One of this library's contenders of benchmark 7 (its Run, inputs and processors)."""
    run = spark_timers.Run(spark, mode, work, plan, timeline)
    run.inputs.mkdir(parents=True)
    for path in files:
        os.link(path, run.inputs / path.name)
    query = run.start()
    query.awaitTermination()
    return measure(ui, query, run.stream, task_stats)


# --- the rows: milliseconds per batch, each from one clock -----------------------------------

Row = tuple[str, Callable[[dict[str, Any]], float | None]]


def _ms(seconds: float) -> float:
    return seconds * 1000


def _stateful_jobs(batch: dict[str, Any]) -> tuple[Job | None, list[Job]]:
    """(the job that runs the Python tasks, the stage's other jobs: the progress branch)."""
    tagged = [job for job in batch["jobs"] if job.in_stateful_stage]
    if not tagged:
        return None, []
    main = max(tagged, key=lambda job: (len(job.stages), job.job_id))
    return main, [job for job in tagged if job is not main]


def _sink_jobs(batch: dict[str, Any]) -> list[Job]:
    """The sink's jobs (Spark's native count: every job of the batch runs in its sink)."""
    if batch.get("dstl") is None:
        return list(batch["jobs"])
    return [job for job in batch["jobs"] if job.in_sink]


def _outside_jobs(batch: dict[str, Any]) -> list[Job] | None:
    """Jobs of a batch of this library's that neither its stage nor the sink started."""
    if batch.get("dstl") is None:
        return None
    return [job for job in batch["jobs"] if not job.in_stateful_stage and not job.in_sink]


def _slowest_task(batch: dict[str, Any]) -> dict[str, Any] | None:
    tasks = batch.get("tasks") or []
    return max(tasks, key=lambda t: float(t["task_seconds"])) if tasks else None


def _task_part(name: str) -> Callable[[dict[str, Any]], float | None]:
    def part(batch: dict[str, Any]) -> float | None:
        task = _slowest_task(batch)
        return None if task is None else _ms(float(task[name]))
    return part


def _store_part(name: str) -> Callable[[dict[str, Any]], float | None]:
    def part(batch: dict[str, Any]) -> float | None:
        task = _slowest_task(batch)
        if task is None:
            return None
        return _ms(float((task.get("store") or {}).get(name, 0.0)))
    return part


def _task_other(batch: dict[str, Any]) -> float | None:
    task = _slowest_task(batch)
    if task is None:
        return None
    parts = sum(float(task[n]) for n in ("input_seconds", "load_seconds", "process_seconds",
                                         "commit_seconds"))
    return _ms(float(task["task_seconds"]) - parts)


def _provider_wait(batch: dict[str, Any]) -> float | None:
    task = _slowest_task(batch)
    if task is None:
        return None
    return _ms(float(task["load_seconds"]) - float((task.get("store") or {})
                                                   .get("load_seconds", 0.0)))


def _commit_other(batch: dict[str, Any]) -> float | None:
    task = _slowest_task(batch)
    if task is None:
        return None
    store = task.get("store") or {}
    return _ms(float(task["commit_seconds"]) - float(store.get("commit_flush_seconds", 0.0))
               - float(store.get("commit_upload_wait_seconds", 0.0)))


def _dstl(name: str) -> Callable[[dict[str, Any]], float | None]:
    def part(batch: dict[str, Any]) -> float | None:
        progress = batch.get("dstl")
        return None if progress is None else _ms(float(getattr(progress, name)))
    return part


def _foreach_batch_other(batch: dict[str, Any]) -> float | None:
    progress = batch.get("dstl")
    if progress is None:
        return None
    add = float(batch["durations"].get("addBatch", 0))
    return add - _ms(progress.stage_seconds + progress.sink_seconds
                     + progress.commit_log_seconds)


def _job_wall(select: Callable[[dict[str, Any]], list[Job] | None]
              ) -> Callable[[dict[str, Any]], float | None]:
    def part(batch: dict[str, Any]) -> float | None:
        jobs = select(batch)
        return None if jobs is None else sum(job.wall_ms for job in jobs)
    return part


def _main_job(batch: dict[str, Any]) -> list[Job] | None:
    if batch.get("dstl") is None:
        return None
    main, _ = _stateful_jobs(batch)
    return [main] if main is not None else []


def _other_stage_jobs(batch: dict[str, Any]) -> list[Job] | None:
    if batch.get("dstl") is None:
        return None
    return _stateful_jobs(batch)[1]


def _stage_rest(batch: dict[str, Any]) -> float | None:
    progress = batch.get("dstl")
    if progress is None:
        return None
    main, others = _stateful_jobs(batch)
    jobs = ([main] if main else []) + others
    return _ms(progress.stage_seconds) - sum(job.wall_ms for job in jobs)


def _sink_rest(batch: dict[str, Any]) -> float | None:
    progress = batch.get("dstl")
    if progress is None:
        return None
    return _ms(progress.sink_seconds) - sum(job.wall_ms for job in _sink_jobs(batch))


def _main_stage(index: int, measure_: str) -> Callable[[dict[str, Any]], float | None]:
    def part(batch: dict[str, Any]) -> float | None:
        jobs = _state_job(batch)
        if not jobs or len(jobs[0].stages) <= index:
            return None
        return float(getattr(jobs[0].stages[index], measure_))
    return part


def _in_job_other(batch: dict[str, Any]) -> float | None:
    jobs = _state_job(batch)
    if not jobs:
        return None
    return jobs[0].wall_ms - sum(stage.wall_ms for stage in jobs[0].stages)


def _engine(name: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda batch: float(batch["durations"].get(name, 0))


def _native(name: str) -> Callable[[dict[str, Any]], float | None]:
    def part(batch: dict[str, Any]) -> float | None:
        if batch.get("dstl") is not None:
            return None
        value = batch["state_operator"].get(name)
        return None if value is None else float(value)
    return part


def _engine_other(batch: dict[str, Any]) -> float:
    durations = batch["durations"]
    named = sum(float(durations.get(n, 0)) for n in (*ENGINE_PARTS, "addBatch"))
    return float(durations.get("triggerExecution", 0)) - named


def _state_job(batch: dict[str, Any]) -> list[Job]:
    return _main_job(batch) or [] if batch.get("dstl") is not None else _sink_jobs(batch)[:1]


def describe_stages(batches: list[dict[str, Any]], index: int) -> str:
    """What stage `index` of the state's job does, as the first measured batch ran it."""
    for batch in batches:
        jobs = _state_job(batch)
        if jobs and len(jobs[0].stages) > index:
            stage = jobs[0].stages[index]
            return f"{stage.label}, {stage.tasks} tasks"
    return "-"


def _stage_rows(stages: int) -> list[Row]:
    rows: list[Row] = []
    for index in range(stages):
        rows += [
            (f"      stage {index + 1} of the job (wall)", _main_stage(index, "wall_ms")),
            ("        executor run time, summed over tasks", _main_stage(index, "run_ms")),
            ("        task deserialization, summed over tasks",
             _main_stage(index, "deserialize_ms")),
            ("        JVM GC, summed over tasks", _main_stage(index, "gc_ms")),
        ]
    return rows


def rows(stages: int) -> list[Row]:
    """The table's rows; indentation shows what a row is part of."""
    return [
        ("batch (engine: triggerExecution)", _engine("triggerExecution")),
        *[(f"  engine: {name}", _engine(name)) for name in ENGINE_PARTS],
        ("  engine: other (not split)", _engine_other),
        ("  addBatch: foreachBatch", _engine("addBatch")),
        ("    stateful stage (driver)", _dstl("stage_seconds")),
        ("      its job: read, shuffle, Python tasks", _job_wall(_main_job)),
        ("      its other jobs", _job_wall(_other_stage_jobs)),
        ("      other in the stage: plan, results to the driver (not split)", _stage_rest),
        ("    sink (driver)", _dstl("sink_seconds")),
        ("      sink's jobs", _job_wall(_sink_jobs)),
        ("      other in the sink (not split)", _sink_rest),
        ("    commit log", _dstl("commit_log_seconds")),
        ("    other in addBatch (not split)", _foreach_batch_other),
        ("Spark jobs of the batch outside the stage and the sink (wall; when: not split)",
         _job_wall(_outside_jobs)),
        ("the job that runs the state (native: the sink's first job)", _job_wall(_state_job)),
        *_stage_rows(stages),
        ("      other in the job: scheduling (not split)", _in_job_other),
        ("slowest Python task (inside its stage)", _task_part("task_seconds")),
        ("  input: shuffle read + Arrow to Python (not split)", _task_part("input_seconds")),
        ("  store load + hand-off", _task_part("load_seconds")),
        ("    the store's own load", _store_part("load_seconds")),
        ("    provider, lock, wait for the last batch's RocksDB write (not split)",
         _provider_wait),
        ("  processor, state reads and writes (not split)", _task_part("process_seconds")),
        ("  commit", _task_part("commit_seconds")),
        ("    final flush: encode and append the change set", _store_part(
            "commit_flush_seconds")),
        ("    wait for the durable changelog (upload)", _store_part(
            "commit_upload_wait_seconds")),
        ("    other in the commit: snapshot bookkeeping (not split)", _commit_other),
        ("  other in the task (not split)", _task_other),
        *[(f"native state operator: {name}, summed over tasks", _native(name))
          for name in NATIVE_STATE],
    ]


def mean_of(batches: list[dict[str, Any]], part: Callable[[dict[str, Any]], float | None]
            ) -> float | None:
    values = [v for v in map(part, batches) if v is not None]
    return statistics.fmean(values) if values else None


def counts(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """Per batch: jobs, stages, shuffle bytes, and how the stores were loaded."""
    kinds: dict[str, int] = {}
    for batch in batches:
        for task in batch.get("tasks") or []:
            kind = str((task.get("store") or {}).get("load_kind", "unknown"))
            kinds[kind] = kinds.get(kind, 0) + 1
    n = max(1, len(batches))
    stages = [stage for batch in batches for job in batch["jobs"] for stage in job.stages]
    return {
        "batches": len(batches),
        "Spark jobs per batch": sum(len(b["jobs"]) for b in batches) / n,
        "Spark stages per batch": len(stages) / n,
        "shuffle written, MB per batch": sum(s.shuffle_write_bytes for s in stages) / n / 1e6,
        "store loads per batch by kind": ", ".join(
            f"{kind} {count / n:.2g}" for kind, count in sorted(kinds.items())) or "-",
    }


def tabulate(report: Report, workload: str, results: dict[str, list[dict[str, Any]]],
             labels: dict[str, str]) -> dict[str, dict[str, Any]]:
    stages = max((len(job.stages) for r in results.values() for b in r for job in b["jobs"]),
                 default=0)
    table_rows = []
    summary: dict[str, dict[str, Any]] = {mode: {} for mode in results}
    for label, part in rows(stages):
        values = {mode: mean_of(batches, part) for mode, batches in results.items()}
        if all(v is None for v in values.values()):
            continue
        for mode, value in values.items():
            summary[mode][label.strip()] = value
        table_rows.append([label, *[value if value is not None else "-"
                                    for value in values.values()]])
        if label.strip().startswith("stage ") and label.strip().endswith("(wall)"):
            index = int(label.split()[1]) - 1
            described = {mode: describe_stages(batches, index)
                         for mode, batches in results.items()}
            for mode, text in described.items():
                summary[mode][f"stage {index + 1} does"] = text
            table_rows.append(["        does", *described.values()])
    for mode, batches in results.items():
        summary[mode].update(counts(batches))
    for name in counts([]):
        table_rows.append([name, *[summary[mode][name] for mode in results]])
    if "a2" in results and "a3" in results:
        with_branch = summary["a2"]["batch (engine: triggerExecution)"]
        without = summary["a3"]["batch (engine: triggerExecution)"]
        if with_branch is not None and without is not None:
            table_rows.append(["progress branch: vectorized batch minus the same without it",
                               *[with_branch - without if m == "a2" else "-" for m in results]])
    report.table(f"Where a batch's milliseconds go: {WORKLOADS[workload]} (mean per batch "
                 f"after the first; local[2], 4 state partitions; load average "
                 f"{os.getloadavg()[0]:.1f})",
                 ["ms per batch", *[labels[m] for m in results]], table_rows)
    return summary


def sample(batch: dict[str, Any]) -> dict[str, Any]:
    """One batch as the JSON keeps it: every clock's raw numbers."""
    progress = batch.get("dstl")
    return {"batch_id": batch["batch_id"], "durations_ms": batch["durations"],
            "jobs": [job.to_dict() for job in batch["jobs"]],
            "state_operator": {k: v for k, v in batch["state_operator"].items()
                               if isinstance(v, int | float)},
            "dstl": None if progress is None else {
                "stage_seconds": progress.stage_seconds, "sink_seconds": progress.sink_seconds,
                "commit_log_seconds": progress.commit_log_seconds,
                "total_seconds": progress.total_seconds, "metrics": progress.metrics},
            "tasks": [_task_sample(task) for task in batch.get("tasks", [])]}


TASK_FIELDS = ("partition", "input_rows", "keys", "task_seconds", "input_seconds",
               "load_seconds", "process_seconds", "commit_seconds")
STORE_FIELDS = ("load_kind", "load_seconds", "commit_flush_seconds",
                "commit_upload_wait_seconds")


def _task_sample(task: dict[str, Any]) -> dict[str, Any]:
    """The task statistics the rows read (the whole report would make the JSON heavy)."""
    store = task.get("store") or {}
    return {**{name: task.get(name) for name in TASK_FIELDS},
            "store": {name: store.get(name) for name in STORE_FIELDS}}


# --- the workloads ------------------------------------------------------------------------

def count_workload(spark: Any, ui: SparkUi, name: str, plan: dict[str, Any], modes: list[str],
                   work: Path, seed: int, warm: bool, stats: TaskStats
                   ) -> dict[str, list[dict[str, Any]]]:
    files = spark_e2e.make_inputs(work / "inputs", plan, seed)
    if warm:
        spark_e2e.warm_up(spark, modes, plan, work / "warm", seed + 1)
    results = {}
    for mode in modes:
        began = time.perf_counter()
        results[mode] = run_count(spark, ui, mode, plan, files, work / mode, stats)
        print(f"  {name} {spark_e2e.MODES[mode]}: {len(results[mode])} batches measured, "
              f"run {time.perf_counter() - began:.1f} s", flush=True)
    return results


def timer_workload(spark: Any, ui: SparkUi, plan: dict[str, Any], modes: list[str], work: Path,
                   seed: int, warm: bool, stats: TaskStats) -> dict[str, list[dict[str, Any]]]:
    workload = spark_timers.Workload(plan, seed)
    files = workload.write(work / "inputs")
    if warm:
        spark_timers.warm_up(spark, modes, work / "warm", seed + 1)
    results = {}
    for mode in modes:
        began = time.perf_counter()
        results[mode] = run_timers(spark, ui, mode, plan, files, workload.timeline,
                                   work / mode, stats)
        print(f"  timers {spark_timers.MODES[mode]}: {len(results[mode])} batches measured, "
              f"run {time.perf_counter() - began:.1f} s", flush=True)
    return results


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or NAME, argv, [
        (["--workloads"], {"default": ",".join(WORKLOADS),
                           "help": "comma-separated from " + ", ".join(WORKLOADS)}),
        (["--no-warmup"], {"action": "store_true", "help": "skip the warm-up runs"}),
    ])
    workloads = chosen_modes(args.workloads, WORKLOADS)
    plans = {w: (QUICK if args.quick else FULL)[w] for w in workloads}
    warm = not args.quick and not args.no_warmup
    from tests.support.spark import build_session

    # the per-batch log lines are still built, but not printed between the tables
    logging.getLogger(PROGRESS_LOGGER).addHandler(logging.NullHandler())
    report = Report(NAME, args, {"workloads": {w: WORKLOADS[w] for w in workloads},
                                 "plans": plans, "count_variants": COUNT_VARIANTS,
                                 "timer_variants": TIMER_VARIANTS, "master": "local[2]",
                                 "warmup": warm, "spark_state_conf": spark_e2e.SPARK_STATE_CONF})
    tables: dict[str, dict[str, dict[str, Any]]] = {}
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {}
    stats: TaskStats = {}
    with scratch(args, "breakdown") as work:
        spark = build_session(master="local[2]", app_name="pyspark-dstl-breakdown",
                              spark_defaults=True,
                              extra={**spark_e2e.SPARK_STATE_CONF, **UI_SETTINGS,
                                     "spark.sql.shuffle.partitions": "4",
                                     "spark.sql.streaming.numRecentProgressUpdates": "1000"})
        try:
            ui = SparkUi(spark)
            with tagged_stages(spark, stats):
                for index, workload in enumerate(workloads):
                    plan = plans[workload]
                    if workload == "timers":
                        results = timer_workload(spark, ui, plan, list(TIMER_VARIANTS),
                                                 work / workload, args.seed, warm, stats)
                        labels = dict(spark_timers.MODES)
                    else:
                        results = count_workload(spark, ui, workload, plan,
                                                 list(COUNT_VARIANTS), work / workload,
                                                 args.seed + index, warm, stats)
                        labels = dict(spark_e2e.MODES)
                    tables[workload] = tabulate(report, workload, results, labels)
                    samples[workload] = {mode: [sample(b) for b in batches]
                                         for mode, batches in results.items()}
        finally:
            spark.stop()
    report.note("milliseconds are means over the batches after the first of one run; "
                "rows indented under a row are parts of it; 'slowest Python task' rows are "
                "inside the state job's last stage and overlap the other tasks; 'summed over "
                "tasks' rows add up work done in parallel on 2 cores")
    report.note("the timers workload runs this library's two contenders only: Spark's own "
                "(transformWithStateInPandas) takes minutes per run, benchmark 7 measures it")
    report.put("breakdown", tables)
    report.put("samples", samples)
    report.save()


if __name__ == "__main__":
    main()
