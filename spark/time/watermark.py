"""Event time in a task: drop rows the watermark already passed, and report the newest time.

Follows Spark: a row is late when its event time is at or before the watermark that was in
force for late rows (the previous batch's), and the next watermark is the newest event time
seen (in milliseconds) minus the delay, never moving back. Rows without an event time are
kept and do not move the watermark.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

MICROS_PER_MS = 1000


def _as_micros(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.cast(pc.cast(column, pa.timestamp("us", tz=column.type.tz)), pa.int64())


def drop_late_rows(table: pa.Table, column: str, late_threshold_ms: int) -> tuple[pa.Table, int]:
    """(rows after the threshold, number of rows dropped). A null event time is never late:
    Spark's late-row filter (event time <= watermark) is not true for null, so it keeps
    such rows, and so do we."""
    if table.num_rows == 0:
        return table, 0
    micros = _as_micros(table.column(column))
    keep = pc.fill_null(pc.greater(micros, late_threshold_ms * MICROS_PER_MS), True)
    kept = table.filter(keep)
    return kept, table.num_rows - kept.num_rows


def max_event_time_ms(table: pa.Table, column: str) -> int | None:
    """The newest event time of the rows in milliseconds (floored), or None for no rows."""
    if table.num_rows == 0:
        return None
    newest = pc.max(_as_micros(table.column(column))).as_py()
    return None if newest is None else int(newest) // MICROS_PER_MS


def next_watermark_ms(current_ms: int, newest_event_ms: int | None, delay_ms: int) -> int:
    """The watermark the next batch uses: it only moves forward."""
    if newest_event_ms is None:
        return current_ms
    return max(current_ms, newest_event_ms - delay_ms)


def late_emitted_rows(table: pa.Table, column: str, late_threshold_ms: int) -> tuple[int, int]:
    """(rows whose event time is at or before the threshold, the oldest such time in epoch
    microseconds; 0 when none). Spark refuses such rows from a transformWithState whose output
    names its event-time column, since the operators after it would have to drop them. A null
    event time is not compared (it passes, as a null passes Spark's late-row filter)."""
    if table.num_rows == 0:
        return 0, 0
    micros = _as_micros(table.column(column))
    late = pc.fill_null(pc.less_equal(micros, late_threshold_ms * MICROS_PER_MS), False)
    count = int(pc.sum(late).as_py() or 0)
    if not count:
        return 0, 0
    return count, int(pc.min(micros.filter(late)).as_py())
