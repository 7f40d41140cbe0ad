"""Per-batch state metrics where Spark users look: a log line and Spark's own progress.

The log lines, quiet unless asked for: one short line per batch at INFO (logger
`PROGRESS_LOGGER`) and the batch's every metric as one JSON object at DEBUG (logger
`PROGRESS_JSON_LOGGER`). They show where the application's logging shows them; the setting
spark.dstl.query.logProgress puts the short line on stderr where nothing configured logging.

Spark's progress: the stateful stage runs inside foreachBatch, after Spark has already read
the batch's input, and Spark takes a progress report's observed metrics from rows that flow
through the streaming plan itself. So the query's plan gets one more branch: a static
"dstl-progress" relation (`readers/progress_source.py`) that yields the metrics of the newest
committed batch, observed as `OBSERVATION`. It is read when a batch starts, so the observed
metrics of batch N describe batch N-1 (their `batch_id` says which); docs/metrics.md explains
why no earlier point exists.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from typing import Any

from pyspark_dstl.spark.readers.progress_source import (
    METRIC_COLUMNS,
    SOURCE_NAME,
    DstlProgressSource,
)

PROGRESS_LOGGER = "pyspark_dstl.progress"
PROGRESS_JSON_LOGGER = PROGRESS_LOGGER + ".json"
OBSERVATION = "dstl_state"
MIB = 1024 * 1024

log = logging.getLogger(PROGRESS_LOGGER)
json_log = logging.getLogger(PROGRESS_JSON_LOGGER)


# --- the log lines --------------------------------------------------------------------------

def progress_line(progress: Any, operator: str) -> str:
    """One batch in one short line: rows, time, what the commit made durable."""
    late = f", {progress.late_rows:,} late" if progress.late_rows else ""
    timers = f", {progress.timers_fired:,} timers" if progress.timers_fired else ""
    return (f"dstl batch {progress.batch_id} {operator}: {progress.input_rows:,} rows in, "
            f"{progress.output_rows:,} out{late}{timers}, {progress.keys:,} keys; "
            f"{progress.total_seconds:.2f} s, changelog {progress.changelog_bytes / MIB:.1f} "
            f"MiB")


def progress_record(progress: Any, operator: str, location: str) -> dict[str, Any]:
    """A BatchProgress as one JSON-ready object (the upload summary flattened into metrics)."""
    fields = dataclasses.asdict(progress)
    fields.pop("upload", None)
    return {"event": "dstl.batch", "operator": operator, "checkpoint_location": location,
            **fields}


def log_batch(progress: Any, operator: str, location: str, *, show: bool = False) -> None:
    """The batch's short line at INFO and its JSON record at DEBUG, each built only when its
    logger would pass it on. `show`: put the short line on stderr if nothing configured
    logging (spark.dstl.query.logProgress)."""
    if show:
        _ensure_visible()
    if log.isEnabledFor(logging.INFO):
        log.info(progress_line(progress, operator))
    if json_log.isEnabledFor(logging.DEBUG):
        json_log.debug(json.dumps(progress_record(progress, operator, location),
                                  sort_keys=True, default=str))


def _ensure_visible() -> None:
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.propagate = False


# --- Spark's progress -----------------------------------------------------------------------

def with_state_progress(df: Any, location: str, operator: str,
                        settings: Mapping[str, str]) -> Any:
    """`df` with the dstl-progress branch whose observed metrics Spark puts in every progress
    report; the rows and columns of `df` are unchanged.

    The branch is cross-joined to `df` as a nested loop join over shuffled-free partitions
    (Spark's CartesianProduct, not a broadcast): its one row (the source yields exactly one)
    is read inside each task that reads an input partition, so the read and the observation
    run inside the batch's own job. A broadcast would run the branch as a Spark job of its
    own before the batch's, and so would any exchange in the branch (adaptive execution plans
    each exchange of a streaming batch as a job of its own)."""
    from pyspark.sql import functions as F

    spark = df.sparkSession
    spark.dataSource.register(DstlProgressSource)
    metrics = (spark.read.format(SOURCE_NAME).option("operatorName", operator)
               .option("settings", json.dumps(dict(settings))).load(location))
    # read once per input partition: aggregates that give the same answer for every copy
    observed = metrics.observe(
        OBSERVATION,
        F.max("__dstl_batch").alias("batch_id"),
        F.coalesce(F.first("__dstl_metrics", ignorenulls=True),
                   F.create_map().cast("map<string,double>")).alias("metrics"))
    joined = df.crossJoin(observed.hint("shuffle_replicate_nl"))
    return joined.drop(*METRIC_COLUMNS)  # by name: a column of df may have a dot in its name


def observed_state_metrics(progress: Any) -> dict[str, Any] | None:
    """{"batch_id": ..., "metrics": {...}} from a StreamingQueryProgress (lastProgress, an
    element of recentProgress or a listener event's progress); None when the report has no
    observation (a no-data report). Spark Connect's client shows the observed row in another
    shape (values and schema); both read the same here."""
    row = progress.observedMetrics.get(OBSERVATION)
    if row is None:
        return None
    data = row.asDict() if hasattr(row, "asDict") else dict(row)
    if set(data) == {"values", "schema"}:
        names = [f["name"] for f in data["schema"]["fields"]]
        data = dict(zip(names, data["values"], strict=True))
    return {"batch_id": data.get("batch_id"), "metrics": dict(data.get("metrics") or {})}
