"""The "dstl-progress" data source: always exactly one row, the newest committed batch of a
checkpoint and its metrics (a null batch and no metrics when there is none). The driver adds it
to the query's plan as a branch whose observed metrics Spark puts in each progress report
(`driver/progress.py` says why a branch, and why exactly one row).

Read inside batch N of a streaming query (Spark's task property `streaming.sql.batchId`), the
newest committed batch is N-1: its entry is found by its own names, so each batch costs one
short listing and one read however long the commit log grows. Elsewhere (a batch read, the
first batch, a batch N-1 that has no entry) the whole log is listed for its newest entry."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from pyspark_dstl.backend.lineage.commit_log import CommitEntry, CommitLog
from pyspark_dstl.spark.stage.open_stores import executor_stores
from pyspark_dstl.spark.stage.worker_heap import freeze_imported_objects

SOURCE_NAME = "dstl-progress"
SCHEMA = "__dstl_batch LONG, __dstl_metrics MAP<STRING, DOUBLE>"
METRIC_COLUMNS = ("__dstl_batch", "__dstl_metrics")
BATCH_PROPERTY = "streaming.sql.batchId"
RUN_PROPERTY = "spark.jobGroup.id"  # a streaming query's jobs run in the group of its run id

_warn = logging.getLogger(__name__)


class MetricsPartition(InputPartition):
    def __init__(self) -> None:
        super().__init__(0)


class DstlProgressSource(DataSource):
    """Options: path (the checkpoint), operatorName, settings (JSON of spark.dstl.* settings
    for the storage). One row per metric of the newest committed batch."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        freeze_imported_objects()  # planned in a reused Python worker too
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        freeze_imported_objects()  # planned in a reused Python worker too
        return MetricsReader(dict(self.options))


class MetricsReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        lowered = {str(k).lower(): str(v) for k, v in options.items()}
        self.url = lowered["path"]
        self.operator = lowered.get("operatorname") or "stateful"
        self.settings = json.loads(lowered.get("settings") or "{}")

    def partitions(self) -> list[InputPartition]:
        return [MetricsPartition()]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """Read when the batch runs, not when it is planned (a static relation is planned once
        per query). Exactly one row whatever happens: the branch is cross-joined to the
        query's input, which an empty branch would empty. A storage failure costs this batch
        its observed metrics, never the batch."""
        freeze_imported_objects()
        running = running_batch()
        if running is None:
            yield self._read_row(None)
            return
        key = (self.url, self.operator, json.dumps(self.settings, sort_keys=True),
               _local_property(RUN_PROPERTY), running)
        row = _READ.get(key)
        if row is None:
            row = self._read_row(running)
            _READ.clear()  # one batch's row per worker process: the newest asked for
            _READ[key] = row
        yield row

    def _read_row(self, running: int | None) -> tuple[Any, ...]:
        try:
            storage = executor_stores().backend(self.settings).context(self.url).storage
            latest = newest_committed(CommitLog(storage), running)
        except Exception as exc:  # telemetry must not fail the query; say so in the log
            _warn.warning("dstl-progress: cannot read the commit log under %r: %s", self.url,
                          exc)
            return (None, None)
        if latest is None:
            return (None, None)
        batch_id, entry = latest
        metrics = {str(name): float(value)
                   for name, value in sorted(dict(entry.extra.get("metrics") or {}).items())}
        return (batch_id, metrics)


# The row of the batch a worker process last read: the branch is read once per input partition
# of a batch, and a reused Python worker answers the later ones without storage requests.
_READ: dict[tuple[str, str, str, str | None, int], tuple[Any, ...]] = {}


def running_batch() -> int | None:
    """The streaming batch this task belongs to; None outside a streaming query's batch."""
    value = _local_property(BATCH_PROPERTY)
    return int(value) if value is not None and value.isdigit() else None


def _local_property(name: str) -> str | None:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.getLocalProperty(name) if context is not None else None


def newest_committed(log: CommitLog, running: int | None) -> tuple[int, CommitEntry] | None:
    """The newest committed batch as seen from batch `running`: the batch before it, read by
    its own names; the whole log's newest when that batch has no entry or `running` is None.
    (A batch re-executed after a restart may have committed before: it is shown the batch
    before it all the same, as on its first run.)"""
    if running is not None and running > 0:
        entry = log.newest_of(running - 1)
        if entry is not None:
            return running - 1, entry
    return log.latest()
