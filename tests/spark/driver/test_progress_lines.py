"""The per-batch log lines (spark/driver/progress.py), without Spark: quiet unless the
application's logging or spark.dstl.query.logProgress asks, one short line when shown, every
metric as JSON for a logging configuration that wants it."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator

import pytest

from pyspark_dstl.spark.driver.operator import BatchProgress
from pyspark_dstl.spark.driver.progress import (
    PROGRESS_JSON_LOGGER,
    PROGRESS_LOGGER,
    log_batch,
    progress_line,
)

LOCATION = "file:///data/checkpoints/counts"
METRICS = {"input_rows": 120_000.0, "output_rows": 3_100.0, "keys": 2_900.0,
           "late_rows": 7.0, "changelog_bytes": 3.5 * 1024 * 1024, "upload_requests": 4.0,
           "upload_bytes": 3.5 * 1024 * 1024, "upload_latency_p99_seconds": 0.08,
           **{f"metric_{i}": float(i) for i in range(60)}}  # a report's many other numbers


def batch(batch_id: int = 12) -> BatchProgress:
    return BatchProgress(batch_id=batch_id, commit_path=f"commits/{batch_id}.0",
                         stage_seconds=0.61, sink_seconds=0.12, commit_log_seconds=0.02,
                         total_seconds=0.84, metrics=dict(METRICS))


@contextlib.contextmanager
def unconfigured_logging() -> Iterator[None]:
    """Python's logging as in a program that configured none (inside the test's call: pytest
    adds its capturing handler to the root logger as the call starts); restored afterwards."""
    root, progress = logging.getLogger(), logging.getLogger(PROGRESS_LOGGER)
    saved = (root.handlers[:], progress.handlers[:], progress.level, progress.propagate)
    root.handlers.clear()
    progress.handlers.clear()
    progress.setLevel(logging.NOTSET)
    try:
        yield
    finally:
        root.handlers[:], progress.handlers[:] = saved[0], saved[1]
        progress.setLevel(saved[2])
        progress.propagate = saved[3]


def test_a_batch_shows_as_one_short_line() -> None:
    line = progress_line(batch(), "stateful")
    assert line == ("dstl batch 12 stateful: 120,000 rows in, 3,100 out, 7 late, 2,900 keys; "
                    "0.84 s, changelog 3.5 MiB")
    assert len(json.dumps(dict(METRICS))) > 10 * len(line)


def test_nothing_shows_where_logging_is_unconfigured(
        capsys: pytest.CaptureFixture[str]) -> None:
    with unconfigured_logging():
        log_batch(batch(), "stateful", LOCATION)
        assert logging.getLogger(PROGRESS_LOGGER).handlers == []
    assert capsys.readouterr().err == ""


def test_the_setting_puts_the_short_line_alone_on_stderr(
        capsys: pytest.CaptureFixture[str]) -> None:
    with unconfigured_logging():
        log_batch(batch(3), "stateful", LOCATION, show=True)
        log_batch(batch(4), "stateful", LOCATION, show=True)
    assert capsys.readouterr().err.splitlines() == [progress_line(batch(3), "stateful"),
                                                     progress_line(batch(4), "stateful")]


def test_a_logging_configuration_at_info_gets_the_short_line_only(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        log_batch(batch(), "stateful", LOCATION)
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        (PROGRESS_LOGGER, logging.INFO, progress_line(batch(), "stateful"))]


def test_a_logging_configuration_at_debug_gets_every_metric_as_one_json_object(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=PROGRESS_JSON_LOGGER):
        log_batch(batch(), "stateful", LOCATION)
    [record] = [r for r in caplog.records if r.name == PROGRESS_JSON_LOGGER]
    shown = json.loads(record.getMessage())
    assert (shown["event"], shown["batch_id"], shown["operator"],
            shown["checkpoint_location"]) == ("dstl.batch", 12, "stateful", LOCATION)
    assert shown["metrics"] == METRICS
