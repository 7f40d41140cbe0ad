"""What PySpark's daemon's full collection after every task costs a Python worker, before and
after the worker freezes the objects it holds (spark/stage/worker_heap.py).

A reused Python worker runs `gc.collect()` after each task, and a full collection visits every
tracked object. This runs one Spark job on a local session whose tasks, each in a real Python
worker forked by PySpark's daemon, first import what a stateful task of this library imports
(the stage, the state store, RocksDB, pandas), then time `rounds` full collections in the
worker's thread CPU time, call `freeze_imported_objects()` as a task does, and time as many
collections again. Both sides run in the same worker process, one after the other; a task that
lands in a worker an earlier task already froze measures nothing (PySpark reuses workers, so
there are more tasks than workers to reach each one).

    python -m benchmarks.worker_gc [--quick] [--tasks 4] [--rounds 9]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from benchmarks.harness import Report, parse_args, plan_of, ratio, summarize

NAME = "worker_gc"
FULL: dict[str, Any] = {"tasks": 8, "rounds": 9}
QUICK: dict[str, Any] = {"tasks": 4, "rounds": 3}
TASK_IMPORTS = ("pyspark_dstl.spark.stage.partition", "pyspark_dstl.backend.store.state_backend",
                "pyspark_dstl.backend.engines.rocksdb", "pandas")  # what a stateful task loads
SCHEMA = "worker long, objects_before long, objects_after long, frozen long, " \
         "before_ms array<double>, after_ms array<double>"


def measure_in_worker(rounds: int, batches: Iterator[Any]) -> Iterator[Any]:
    """mapInArrow function: one row per task with the collections' CPU milliseconds."""
    import gc
    import importlib
    import os
    import time

    import pyarrow as pa

    from pyspark_dstl.spark.stage.worker_heap import freeze_imported_objects

    for module in TASK_IMPORTS:
        importlib.import_module(module)

    for _ in batches:
        pass
    if gc.get_freeze_count():  # an earlier task of this worker measured it
        return

    def collections() -> list[float]:
        taken = []
        for _ in range(rounds):
            began = time.thread_time()
            gc.collect()
            taken.append((time.thread_time() - began) * 1000)
        return taken

    objects_before = len(gc.get_objects())
    before = collections()
    freeze_imported_objects()
    after = collections()
    yield pa.RecordBatch.from_pylist([{
        "worker": os.getpid(), "objects_before": objects_before,
        "objects_after": len(gc.get_objects()), "frozen": gc.get_freeze_count(),
        "before_ms": before, "after_ms": after}])


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or NAME, argv, [
        (["--tasks"], {"type": int, "default": None, "help": "tasks (Python workers' turns)"}),
        (["--rounds"], {"type": int, "default": None, "help": "collections timed per side"}),
    ])
    plan = plan_of(args, QUICK, FULL, ("tasks", "rounds"))
    import functools

    from tests.support.spark import build_session

    report = Report(NAME, args, {**plan, "master": "local[2]"})
    spark = build_session(master="local[2]", app_name="pyspark-dstl-bench-worker-gc",
                          spark_defaults=True)
    try:
        source = spark.range(0, plan["tasks"], 1, plan["tasks"])
        rows = source.mapInArrow(functools.partial(measure_in_worker, plan["rounds"]),
                                 SCHEMA).collect()
    finally:
        spark.stop()
    samples = sorted((row.asDict() for row in rows), key=lambda sample: sample["worker"])
    table: list[list[Any]] = []
    for sample in samples:  # worker ids: the order of the rows, not shown
        before, after = summarize(sample["before_ms"]), summarize(sample["after_ms"])
        table.append([f"worker {len(table) + 1}", sample["objects_before"], sample["objects_after"],
                      before["p50"], after["p50"], ratio(before["p50"], after["p50"])])
    report.table(f"A full collection in a Python worker (CPU ms, median of {plan['rounds']}), "
                 f"before and after the freeze, one row per worker",
                 ["worker", "tracked objects before", "after", "collection before (ms)",
                  "after (ms)", "before/after"], table)
    report.put("samples", samples)
    report.save()


if __name__ == "__main__":
    main()
