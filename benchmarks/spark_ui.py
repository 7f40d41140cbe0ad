"""Spark's own account of a streaming query's batches: its jobs and their stages, read from
the monitoring REST API of the driver's UI (on 127.0.0.1), for the breakdown benchmark.

Spark names a streaming job by its batch (the job group is the query's run id, the
description ends in "batch = N"); inside foreachBatch every job of a batch looks alike, so
the breakdown tags the jobs of this library's stateful stage (`tagged_stages`) and tells the
rest apart by what Spark records: stages, tasks, shuffle bytes and times.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

STAGE_TAG = "dstl-bench-stateful-stage"
SINK_TAG = "dstl-bench-sink"
UI_SETTINGS = {
    "spark.ui.enabled": "true",
    "spark.ui.host": "127.0.0.1",  # never reachable from outside the machine
    "spark.ui.retainedJobs": "5000",
    "spark.ui.retainedStages": "10000",
}
_BATCH = re.compile(r"batch = (\d+)\s*$")


def _instant(text: str | None) -> float | None:
    """A UI time ("2026-11-26T12:10:49.693GMT") as epoch seconds."""
    if not text:
        return None
    return datetime.fromisoformat(text.removesuffix("GMT") + "+00:00").timestamp()


@dataclass(frozen=True)
class Stage:
    """One executed stage as the UI records it (milliseconds are summed over its tasks)."""

    stage_id: int
    tasks: int
    wall_ms: float
    run_ms: float
    deserialize_ms: float
    gc_ms: float
    input_bytes: int
    shuffle_read_bytes: int
    shuffle_write_bytes: int

    @property
    def label(self) -> str:
        """What the stage does, from what it reads and writes."""
        source = "shuffle read" if self.shuffle_read_bytes else "scan"
        sink = "shuffle write" if self.shuffle_write_bytes else "result"
        return f"{source} -> {sink}"

    @classmethod
    def from_ui(cls, data: dict[str, Any]) -> Stage:
        began, ended = _instant(data.get("submissionTime")), _instant(data.get("completionTime"))
        return cls(int(data["stageId"]), int(data["numTasks"]),
                   (ended - began) * 1000 if began is not None and ended is not None else 0.0,
                   float(data.get("executorRunTime", 0)),
                   float(data.get("executorDeserializeTime", 0)),
                   float(data.get("jvmGcTime", 0)), int(data.get("inputBytes", 0)),
                   int(data.get("shuffleReadBytes", 0)), int(data.get("shuffleWriteBytes", 0)))


@dataclass(frozen=True)
class Job:
    """One job of a batch, with its executed stages (skipped ones are not listed)."""

    job_id: int
    batch_id: int
    wall_ms: float
    tags: tuple[str, ...]
    stages: tuple[Stage, ...] = field(default_factory=tuple)

    @property
    def in_stateful_stage(self) -> bool:
        return any(tag.endswith(STAGE_TAG) for tag in self.tags)

    @property
    def in_sink(self) -> bool:
        return any(tag.endswith(SINK_TAG) for tag in self.tags)

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job_id, "wall_ms": self.wall_ms, "tags": list(self.tags),
                "stages": [{"stage": s.stage_id, "does": s.label, "tasks": s.tasks,
                            "wall_ms": s.wall_ms, "run_ms": s.run_ms,
                            "shuffle_read_bytes": s.shuffle_read_bytes,
                            "shuffle_write_bytes": s.shuffle_write_bytes}
                           for s in self.stages]}


class SparkUi:
    """The REST API of one SparkContext's UI."""

    def __init__(self, spark: Any) -> None:
        context = spark.sparkContext
        address = context.uiWebUrl
        if not address:
            raise RuntimeError("the Spark UI is off: the breakdown needs spark.ui.enabled=true")
        port = urlsplit(address).port
        self.base = f"http://127.0.0.1:{port}/api/v1/applications/{context.applicationId}"

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.base}/{path}", timeout=30) as response:
            return json.load(response)

    def jobs(self, run_id: str, settle_seconds: float = 10.0) -> list[Job]:
        """Every job of one run of a query, by batch, once the UI has seen them all end."""
        deadline = time.monotonic() + settle_seconds
        while True:
            raw = [j for j in self._get("jobs") if j.get("jobGroup") == run_id]
            if all(j["status"] != "RUNNING" for j in raw) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        stages = {}
        for data in self._get("stages?status=complete"):
            stage = Stage.from_ui(data)
            stages[stage.stage_id] = stage  # a retried stage: its last attempt
        jobs = []
        for data in raw:
            found = _BATCH.search(data.get("description") or "")
            if found is None:
                continue
            began = _instant(data.get("submissionTime"))
            ended = _instant(data.get("completionTime"))
            wall = (ended - began) * 1000 if began is not None and ended is not None else 0.0
            jobs.append(Job(int(data["jobId"]), int(found.group(1)), wall,
                            tuple(data.get("jobTags") or ()),
                            tuple(stages[s] for s in sorted(data["stageIds"]) if s in stages)))
        return sorted(jobs, key=lambda job: job.job_id)


BATCH_PROGRESS: dict[tuple[str, int], Any] = {}
"""Every batch's BatchProgress by (location, batch id) while `tagged_stages` is on: a query
started through the switch hands out Spark's StreamingQuery, not this library's stream."""


@contextmanager
def tagged_stages(spark: Any, task_stats: dict[tuple[str, int], list[dict[str, Any]]]
                  ) -> Iterator[None]:
    """While inside: the jobs this library's stateful stage starts carry STAGE_TAG, those of
    the user's sink (from the output frame to the commit log) SINK_TAG, and each batch's task
    statistics are kept in `task_stats` by (location, batch id). Driver-side
    instrumentation of the benchmark only; put back on the way out."""
    from pyspark_dstl.spark.driver.operator import StatefulOperator

    context = spark.sparkContext
    execute = StatefulOperator.execute
    output_frame = StatefulOperator.output_frame
    commit = StatefulOperator.commit
    process_batch = StatefulOperator.process_batch

    def kept_process_batch(self: StatefulOperator, df: Any, batch_id: int,
                           sink: Any = None) -> Any:
        progress = process_batch(self, df, batch_id, sink)
        BATCH_PROGRESS[(self.location, batch_id)] = progress
        return progress

    def tagged_execute(self: StatefulOperator, df: Any, batch_id: int,
                       base: Any = None) -> Any:
        context.addJobTag(STAGE_TAG)
        try:
            result = execute(self, df, batch_id, base)
        finally:
            context.removeJobTag(STAGE_TAG)
        task_stats[(self.location, batch_id)] = list(result.stats.values())
        return result

    def tagged_output_frame(self: StatefulOperator, spark: Any, result: Any) -> Any:
        context.addJobTag(SINK_TAG)  # the sink runs next, until commit() below
        return output_frame(self, spark, result)

    def untagged_commit(self: StatefulOperator, result: Any,
                        chained: list[Any] | None = None) -> str:
        context.removeJobTag(SINK_TAG)
        return commit(self, result, chained)

    StatefulOperator.execute = tagged_execute  # type: ignore[method-assign]
    StatefulOperator.output_frame = tagged_output_frame  # type: ignore[method-assign]
    StatefulOperator.commit = untagged_commit  # type: ignore[method-assign]
    StatefulOperator.process_batch = kept_process_batch  # type: ignore[method-assign]
    try:
        yield
    finally:
        StatefulOperator.execute = execute  # type: ignore[method-assign]
        StatefulOperator.output_frame = output_frame  # type: ignore[method-assign]
        StatefulOperator.commit = commit  # type: ignore[method-assign]
        StatefulOperator.process_batch = process_batch  # type: ignore[method-assign]
