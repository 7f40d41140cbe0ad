"""What a stateful task tells the driver: one typed record per state partition and attempt.

The task builds a `TaskReport`, sends it as JSON in the meta column of its last row, and the
driver reads it back once (`TaskReport.from_json`). Everything the driver derives from a task,
the commit entry's checkpoints, the batch's metrics, the clocks the next batch needs, comes
from these fields, so the contract between the two sides is this class and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pyspark_dstl.backend.backend_errors import CorruptCheckpointError
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.spark.spark_errors import CommitValidationError
from pyspark_dstl.spark.stage.output_files import OutputPart

Plain = None | bool | int | float | str


@dataclass(frozen=True)
class TaskReport:
    """One task attempt of one state partition: its new checkpoint and what it did."""

    partition: int
    attempt: int
    info: StoreCommit
    input_rows: int  # late rows included
    late_rows: int
    initial_state_rows: int
    keys: int
    timers_fired: int
    next_timer_ms: int | None  # the partition's earliest registered timer after the batch
    max_event_time_ms: int | None  # the newest event time among the input rows
    output_rows: int
    input_seconds: float  # the partition's rows arriving from the JVM as Arrow (shuffle read)
    load_seconds: float
    process_seconds: float
    commit_seconds: float
    task_seconds: float
    store: Mapping[str, Plain] = field(default_factory=dict)  # the store's own metrics
    upload: Mapping[str, Any] = field(default_factory=dict)  # the changelog's upload delta
    output: OutputPart | None = None  # outputMode "files": the part this attempt wrote

    @property
    def changelog_bytes(self) -> int:
        return int(self.info.changelog.size)

    @property
    def materialized_version(self) -> int | None:
        return self.info.materialized.version if self.info.materialized else None

    def measures(self) -> dict[str, Any]:
        """The report as the flat statistics the batch's metrics fold (ops/batch_metrics.py)."""
        flat: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)
                                if f.name not in ("info", "output")}
        flat["changelog_bytes"] = self.changelog_bytes
        flat["materialized_version"] = self.materialized_version
        flat["materialized_partitions"] = int(self.materialized_version is not None)
        if self.output is not None:
            flat["output_file_bytes"] = self.output.bytes
            flat["output_write_seconds"] = self.output.write_seconds
        return flat

    def to_json(self) -> str:
        record: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        record["info"] = self.info.to_dict()
        record["store"] = {k: v for k, v in self.store.items() if _is_plain(v)}
        record["upload"] = dict(self.upload)
        record["output"] = self.output.to_dict() if self.output is not None else None
        return json.dumps(record, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, batch_id: int) -> TaskReport:
        """Read a meta row; one that does not hold exactly a report's fields is refused."""
        try:
            record = json.loads(text)
            names = {f.name for f in fields(cls)}
            if not isinstance(record, dict) or set(record) != names:
                raise ValueError(f"fields {sorted(record) if isinstance(record, dict) else []}")
            record["info"] = StoreCommit.from_dict(record["info"])
            if record["output"] is not None:
                record["output"] = OutputPart.from_dict(record["output"])
            return cls(**record)
        except (ValueError, KeyError, TypeError, CorruptCheckpointError) as exc:
            raise CommitValidationError(
                f"batch {batch_id}: a task's report cannot be read ({exc}); the executors "
                f"run another version of pyspark-dstl than the driver?") from exc


def _is_plain(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)
