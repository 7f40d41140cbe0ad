"""Where one firing task of benchmark 7 spends its time, measured in this process.

A Spark batch's duration mixes the stateful task with the engine's fixed costs (planning,
scheduling, the sink's job, the commit log). To see the task alone, this runs what a task of
benchmarks/spark_timers.py runs, on one partition's share of the keys, without Spark: the
backend's RocksDB store on file://, the same processors and the same runner
(spark/stage/runner.py), batch 0 registering the timers and every later batch firing one
slot. Named steps of the runner are timed by wrapping them while it runs: the due-timer scan,
key decoding, the processor's calls, the timer deletes, the earliest-timer seek (which first
flushes the batch's writes to RocksDB and the changelog) and the output's conversion to Arrow;
"other" is the runner's own per-timer loop and whatever is not wrapped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.spark_timer_jobs import PerKeyTimeout, VectorizedTimeout
from benchmarks.step_clock import StepClock
from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.spark.keys.key_grouping import KeyGrouping, with_group_column
from pyspark_dstl.spark.stage import runner
from pyspark_dstl.spark.stage.output import OutputCollector
from pyspark_dstl.spark.stage.runner import BatchTimes, run_processor
from pyspark_dstl.spark.time.timers import TimerIndex

GROUPING = KeyGrouping(("string",), KEY_GROUPS)  # the workload's key: one string column
OUTPUT = pa.schema([("user", pa.string()), ("expiry", pa.int64()), ("seen", pa.int64())])
PHASES = (  # (label, owner, attributes) of each wrapped step, in the order they run
    ("due-timer scan", TimerIndex, ("due",)),
    ("key decoding", runner, ("decode_key",)),
    ("timer exists checks", TimerIndex, ("exists",)),
    ("processor calls", runner, ("_collect",)),
    ("timer deletes", TimerIndex, ("delete", "delete_fired", "delete_all_fired")),
    ("earliest timer + flush", TimerIndex, ("earliest",)),
    ("output to Arrow", OutputCollector, ("finish",)),
)
PROCESSORS: dict[str, Callable[[], Any]] = {"vectorized": VectorizedTimeout,
                                            "per_key": PerKeyTimeout}


class PhaseClock(StepClock):
    """Adds up the wall time and this thread's CPU time spent in the wrapped steps while
    `installed` (CPU time as "<label> cpu": on a shared machine it varies far less than
    wall time, but it misses waits, e.g. for the commit's upload thread)."""

    def __init__(self) -> None:
        super().__init__([(label, owner, attribute) for label, owner, attributes in PHASES
                          for attribute in attributes])

    def wrap(self, label: str, function: Callable[..., Any]) -> Callable[..., Any]:
        seconds = self.seconds
        cpu_label = label + " cpu"

        def timed(*args: Any, **kwargs: Any) -> Any:
            began, began_cpu = time.perf_counter(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[label] += time.perf_counter() - began
                seconds[cpu_label] += time.thread_time() - began_cpu

        return timed


def breakdown(workload: Any, work: Path, modes: list[str], batches: int
              ) -> dict[str, list[dict[str, float]]]:
    """Per mode, one dict of seconds per firing batch: every phase, run, commit and load, in
    wall time and (key + " cpu") in this thread's CPU time.

    `workload` is a benchmarks.spark_timers.Workload sized to one partition's keys."""
    results: dict[str, list[dict[str, float]]] = {}
    registration = with_group_column(workload.file_table(0), ("user",), GROUPING)
    for mode in modes:
        backend = StateBackend(BackendSettings.from_mapping(
            {"spark.dstl.stateStore.localDir": str(work / mode / "local")}))
        try:
            provider = backend.provider((work / mode / "checkpoint").as_uri(), "stateful", 0)
            store = provider.get_store(0)
            run_processor(VectorizedTimeout(), store, registration, ("user",), OUTPUT,
                          batch_id=0, partition_id=0,
                          times=BatchTimes(_now_ms(), 0, "event_time"), grouping=GROUPING)
            info = store.commit()
            samples = []
            clock = PhaseClock()
            for batch_id in range(1, batches + 1):
                table = with_group_column(workload.file_table(batch_id), ("user",), GROUPING)
                began, began_cpu = time.perf_counter(), time.thread_time()
                store = provider.get_store(info.version, info)
                loaded, loaded_cpu = time.perf_counter(), time.thread_time()
                with clock.installed():
                    result = run_processor(
                        PROCESSORS[mode](), store, table, ("user",),
                        OUTPUT, batch_id=batch_id, partition_id=0,
                        times=BatchTimes(_now_ms(), workload.watermark_ms(batch_id), "event_time"),
                        grouping=GROUPING)
                ran, ran_cpu = time.perf_counter(), time.thread_time()
                info = store.commit()
                committed, committed_cpu = time.perf_counter(), time.thread_time()
                expected = workload.expected(batch_id).num_rows
                if result.timers_fired != expected or result.output.num_rows != expected:
                    raise RuntimeError(f"in-process {mode} batch {batch_id}: fired "
                                       f"{result.timers_fired} timers, expected {expected}")
                samples.append({**clock.take(), "load": loaded - began, "run": ran - loaded,
                                "commit": committed - ran, "load cpu": loaded_cpu - began_cpu,
                                "run cpu": ran_cpu - loaded_cpu,
                                "commit cpu": committed_cpu - ran_cpu,
                                "timers": float(result.timers_fired)})
            results[mode] = samples
        finally:
            backend.close()
    return results


def _now_ms() -> int:
    return int(time.time() * 1000)
