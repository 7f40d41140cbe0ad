"""The "dstl-progress" data source: one row per metric of a checkpoint's newest committed
batch. The driver adds it to the query's plan as a branch whose observed metrics Spark puts in
each progress report (`driver/progress.py` says why a branch)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.spark.task.store_cache import store_cache

SOURCE_NAME = "dstl-progress"
SCHEMA = "__dstl_batch LONG, __dstl_metric STRING, __dstl_value DOUBLE"
METRIC_COLUMNS = ("__dstl_batch", "__dstl_metric", "__dstl_value")

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
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
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
        per query). A storage failure costs this batch its observed metrics, never the batch."""
        try:
            storage = store_cache().backend(self.settings).context(self.url).storage
            latest = CommitLog(storage).latest()
        except Exception as exc:  # telemetry must not fail the query; say so in the log
            _warn.warning("dstl-progress: cannot read the commit log under %r: %s", self.url,
                          exc)
            return
        if latest is None:
            return
        batch_id, entry = latest
        for name, value in sorted(dict(entry.extra.get("metrics") or {}).items()):
            yield (batch_id, str(name), float(value))
