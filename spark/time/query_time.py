"""A query's time settings, read from what the user gave and from the input's schema: the
time mode, the event-time column (named, or the one df.withWatermark marked) and the watermark
delay. Checked on the driver when the stateful step is defined."""

from __future__ import annotations

from typing import Any

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.core.units import parse_duration
from pyspark_dstl.spark.time.clock import TimeSpec
from pyspark_dstl.spark.time.modes import time_mode_of

WATERMARK_METADATA = "spark.watermarkDelayMs"  # what df.withWatermark puts on the column
EVENT_TIME_TYPES = ("timestamp", "timestamp_ntz")


def time_spec(df: Any, time_mode: Any, event_time: str | None,
              watermark_delay: str | float | None) -> TimeSpec:
    """The query's time settings, checked against the input's schema."""
    mode = time_mode_of(time_mode)
    if event_time is None and watermark_delay is not None:
        raise ConfigError("watermark_delay: given without event_time (the column it applies "
                          "to)")
    column, delay_ms = event_time, None
    if column is None:
        marked = [(f.name, f.metadata[WATERMARK_METADATA]) for f in df.schema.fields
                  if WATERMARK_METADATA in (f.metadata or {})]
        if len(marked) > 1:
            raise ConfigError(f"event_time: the input has several watermarked columns "
                              f"{[name for name, _ in marked]}; name one with event_time=...")
        if marked:
            column, delay_ms = marked[0][0], int(marked[0][1])
    elif watermark_delay is None:
        metadata = df.schema[column].metadata if column in df.columns else {}
        if WATERMARK_METADATA not in (metadata or {}):
            raise ConfigError(f"watermark_delay: needed with event_time={column!r} (or set a "
                              f"watermark with df.withWatermark({column!r}, ...))")
        delay_ms = int(metadata[WATERMARK_METADATA])
    else:
        delay_ms = round(parse_duration(watermark_delay, "watermark_delay") * 1000)
    if column is not None:
        if column not in df.columns:
            raise ConfigError(f"event_time: no column {column!r} in {df.columns}")
        type_name = df.schema[column].dataType.typeName()
        if type_name not in EVENT_TIME_TYPES:
            raise ConfigError(f"event_time: column {column!r} has type {type_name}; the "
                              f"event-time column must be a timestamp")
    if mode == "event_time" and column is None:
        raise ConfigError("time_mode: event_time needs an event-time column: pass "
                          "event_time=<column> and watermark_delay=..., or use "
                          "df.withWatermark(<column>, <delay>) on the input")
    return TimeSpec(mode, column, delay_ms or 0)


def check_output_event_time(df: Any, output_schema: Any, column: str, what: str) -> None:
    """A stateful step's output column that carries event time on to the steps after it
    (PySpark's eventTimeColumnName): a timestamp column of the output, inheriting the
    watermark of the step's input, which must therefore have one."""
    if column not in output_schema.names:
        raise ConfigError(f"{what}: no column {column!r} in the output schema "
                          f"({', '.join(output_schema.names)})")
    type_name = output_schema[column].dataType.typeName()
    if type_name not in EVENT_TIME_TYPES:
        raise ConfigError(f"{what}: output column {column!r} has type {type_name}; the "
                          f"event-time column must be a timestamp")
    require_watermark_for_event_time(df, what)


def require_watermark_for_event_time(df: Any, what: str) -> None:
    """Spark's CANNOT_ASSIGN_EVENT_TIME_COLUMN_WITHOUT_WATERMARK: the output's event-time
    column takes the delay of the input's watermark."""
    if not any(WATERMARK_METADATA in (f.metadata or {}) for f in df.schema.fields):
        raise ConfigError(
            f"{what}: Watermark needs to be defined to reassign event time column "
            f"(CANNOT_ASSIGN_EVENT_TIME_COLUMN_WITHOUT_WATERMARK in Spark): call "
            f"df.withWatermark(<timestamp column>, <delay>) on the input of the stateful step")
