"""The task -> driver contract: a TaskReport travels as JSON in the meta row and reads back
whole; a meta row that is not a report is refused by name."""

from __future__ import annotations

import json

import pytest

from pyspark_dstl.spark.spark_errors import CommitValidationError
from pyspark_dstl.spark.stage.output_files import OutputPart
from pyspark_dstl.spark.stage.report import TaskReport
from tests.support.backend import info_of


def report(**changes: object) -> TaskReport:
    fields: dict[str, object] = dict(
        partition=2, attempt=1, info=info_of(2, 3, "abcd"), input_rows=10, late_rows=1,
        initial_state_rows=0, keys=4, timers_fired=2, next_timer_ms=5_000,
        max_event_time_ms=4_000, output_rows=3, input_seconds=0.0625, load_seconds=0.5,
        process_seconds=0.25, commit_seconds=0.125, task_seconds=1.0,
        store={"load_kind": "restore"}, upload={"requests": 2}, output=None)
    fields.update(changes)
    return TaskReport(**fields)  # type: ignore[arg-type]


def test_a_report_reads_back_equal_from_its_json() -> None:
    original = report(output=OutputPart(2, "out/part-2", 3, 512, 0.01, "md5"))
    assert TaskReport.from_json(original.to_json(), batch_id=7) == original


def test_measures_are_the_flat_numbers_the_batch_metrics_fold() -> None:
    measures = report(output=OutputPart(2, None, 3, 0)).measures()
    assert measures["input_rows"] == 10
    assert measures["changelog_bytes"] == 40  # the segment's length, not its file's offset
    assert measures["materialized_partitions"] == 0
    assert measures["output_file_bytes"] == 0
    assert "info" not in measures and "output" not in measures


def test_a_store_metric_that_is_not_a_plain_value_stays_in_the_task() -> None:
    sent = report(store={"load_kind": "reuse", "files": ["a", "b"]})
    assert TaskReport.from_json(sent.to_json(), batch_id=0).store == {"load_kind": "reuse"}


@pytest.mark.parametrize("damage", [
    lambda record: record.pop("keys"),
    lambda record: record.update(surprise=1),
    lambda record: record.update(info={"format_version": 99}),
])
def test_a_meta_row_that_is_not_a_whole_report_is_refused_naming_the_batch(damage) -> None:  # type: ignore[no-untyped-def]
    record = json.loads(report().to_json())
    damage(record)
    with pytest.raises(CommitValidationError, match=r"^batch 7: a task's report cannot be read"):
        TaskReport.from_json(json.dumps(record), batch_id=7)
