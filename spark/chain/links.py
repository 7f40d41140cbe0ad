"""`ChainLink`: one stateful step after the first, as the driver runs it in every batch.

A link is planned once, when the step is written (`planning.py`), and holds what each batch
needs: how to turn the previous step's output into this step's input rows (the stateless
steps in between, then a projection Spark evaluates), the processor its tasks run, its key
columns, its output, and how it uses event time. `record` is what the commit entry keeps of
it, so a restart can tell that the stored state is this step's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

AGGREGATE = "aggregate"
SESSION_AGGREGATE = "session_aggregate"
DEDUPLICATE = "deduplicate"
DEDUPLICATE_WITHIN_WATERMARK = "deduplicate_within_watermark"
TRANSFORM = "transform"
KINDS = (AGGREGATE, SESSION_AGGREGATE, DEDUPLICATE, DEDUPLICATE_WITHIN_WATERMARK, TRANSFORM)
AGGREGATIONS = (AGGREGATE, SESSION_AGGREGATE)


def chained_name(first: str, position: int) -> str:
    """The operator name of the step at `position` (1, 2, ...) after the first step `first`:
    its directory under state/ and its name in the commit log."""
    return f"{first}.{position}"


@dataclass(frozen=True)
class ChainLink:
    """One chained step. `time_mode` and `late_column` are its tasks' clocks: timers (and
    evictions) fire at the eviction watermark in "event_time"; rows of `late_column` at or
    before the late-events watermark are dropped."""

    kind: str
    label: str  # the step as written, for messages
    processor: Any
    key_columns: tuple[str, ...]  # in the prepared input
    output_schema: Any  # StructType of the step's output
    template: Any  # the output as an empty batch DataFrame, watermark metadata included
    prepare: Callable[[Any], Any]  # previous step's batch output -> this step's input rows
    time_mode: str = "none"
    late_column: str | None = None
    emits_event_time: str | None = None  # a transform's eventTimeColumnName, checked
    swallows_watermark: bool = False  # a transform in processing time: none after it
    record: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_aggregation(self) -> bool:
        return self.kind in AGGREGATIONS
