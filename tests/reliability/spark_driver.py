"""The driver of the executor-loss test, run as a process of its own against a standalone master:

    python -m tests.reliability.spark_driver <master> <inputs> <checkpoint> <markers> \
        --conf spark.dstl.KEY=VALUE ...

It runs the keyed count (tests/support/spark.py) over every input file with an
:class:`ObservedCountProcessor`, which tells the test where each partition ran and holds one
task still so the test can kill the worker under it. One line "committed batch N" per batch.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark_dstl.spark import StatefulProcessorHandle, stateful
from tests.support.spark import (
    COUNT_SCHEMA,
    REPO_ROOT,
    CountProcessor,
    file_stream,
    prepare_environment,
    session_settings,
)

HOLD_SECONDS = 120.0  # the test kills the worker long before; a stuck run still ends
HELD_MARKER = "held"


def process_groups() -> tuple[int, int]:
    """(PySpark daemon's group, standalone worker's group) of this Python worker (Linux).

    The daemon leads a process group of its own; its parent, the executor JVM, stays in the
    group of the standalone worker that launched it."""
    daemon = os.getpgid(0)
    with open(f"/proc/{daemon}/stat", encoding="ascii") as stat:
        executor = int(stat.read().rsplit(")", 1)[1].split()[1])
    return daemon, os.getpgid(executor)


class ObservedCountProcessor(CountProcessor):
    """Counts, and leaves a marker per (batch, partition) naming the process groups it runs
    in. The first attempt that reaches `hold` = (batch, partition) writes the "held" marker
    and waits there until it is killed."""

    def __init__(self, markers: str, hold: tuple[int, int] | None) -> None:
        self.markers = markers
        self.hold = hold

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        if handle.declaring_only:  # the driver's check of init(): no batch runs there
            return
        daemon, worker = process_groups()
        where = (handle.batch_id, handle.partition_id)
        (Path(self.markers) / f"seen-{where[0]}-{where[1]}-{daemon}-{worker}").touch()
        if where != self.hold:
            return
        try:
            descriptor = os.open(Path(self.markers) / HELD_MARKER,
                                 os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # a later attempt: go on
        os.write(descriptor, f"{daemon} {worker}".encode())
        os.close(descriptor)
        time.sleep(HOLD_SECONDS)


def parse_conf(items: Sequence[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in items)


def main(argv: Sequence[str]) -> int:
    master, inputs, checkpoint, markers = argv[:4]
    rest = list(argv[4:])
    hold: tuple[int, int] | None = None
    conf: list[str] = []
    while rest:
        flag, value = rest.pop(0), rest.pop(0)
        if flag == "--hold":
            batch, partition = value.split(",")
            hold = (int(batch), int(partition))
        elif flag == "--conf":
            conf.append(value)
    prepare_environment()
    from pyspark.sql import SparkSession

    settings = session_settings({
        "spark.executor.cores": "1", "spark.executor.memory": "512m",
        "spark.task.maxFailures": "8", "spark.executorEnv.PYTHONPATH": str(REPO_ROOT),
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable, **parse_conf(conf)})
    builder: Any = SparkSession.builder.master(master).appName("dstl-reliability")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    stream = (stateful(file_stream(spark, Path(inputs))).group_by("user")
              .process(ObservedCountProcessor(markers, hold), COUNT_SCHEMA,
                       checkpoint_location=checkpoint, partitions=4)
              .on_progress(lambda p: print(f"committed batch {p.batch_id}", flush=True)))
    stream.start(trigger={"availableNow": True}).awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
