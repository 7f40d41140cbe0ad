"""Checks made on the driver when a stateful step is defined, so mistakes fail before any task.

The processor's `init` runs once against a handle that records declarations but refuses state
access (as PySpark's driver-side pre-init does), on a copy of the processor: a bad state name
or TTL fails here, not inside the first batch's tasks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark_dstl.backend.spark.errors import StateVariableError
from pyspark_dstl.backend.spark.processor import AnyProcessor, StatefulProcessorHandle
from pyspark_dstl.backend.spark.state import KeyContext
from pyspark_dstl.backend.spark.timing import TimeSpec
from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.core.units import parse_duration

WATERMARK_METADATA = "spark.watermarkDelayMs"  # what df.withWatermark puts on the column
EVENT_TIME_TYPES = ("timestamp", "timestamp_ntz")
_MODE_WORDS = {"none": "none", "processingtime": "processing_time",
               "eventtime": "event_time"}


def time_mode_of(value: Any) -> str:
    """"processing_time", "ProcessingTime" and "processingtime" all name the same mode."""
    word = str(value).strip().lower().replace("_", "").replace(" ", "")
    if word not in _MODE_WORDS:
        raise ConfigError(f"time_mode: expected none, processing_time or event_time (PySpark: "
                          f"None, ProcessingTime, EventTime), got {value!r}")
    return _MODE_WORDS[word]


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


class _DriverStore:
    """State access is refused on the driver: init() may only declare."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise StateVariableError("state is not available in init(): declare state variables "
                                 "there and use them in the handle_* methods")

    def get(self, key: bytes, cf: str) -> bytes | None:
        return self._refuse()

    def put(self, key: bytes, value: bytes, cf: str) -> None:
        self._refuse()

    def remove(self, key: bytes, cf: str) -> None:
        self._refuse()

    def multi_get(self, keys: Sequence[bytes], cf: str) -> list[bytes | None]:
        return self._refuse()

    def put_many(self, items: Iterable[tuple[bytes, bytes]] = (), cf: str = "", *,
                 keys: Sequence[bytes] | None = None,
                 values: Sequence[bytes] | None = None) -> None:
        self._refuse()

    def remove_many(self, keys: Iterable[bytes], cf: str) -> None:
        self._refuse()

    def prefix_scan(self, prefix: bytes, cf: str) -> Iterator[tuple[bytes, bytes]]:
        return self._refuse()


def declaring_handle(time_mode: str = "none") -> StatefulProcessorHandle:
    """A handle that records declarations and refuses state access, as init() sees it on
    the driver."""
    return StatefulProcessorHandle(_DriverStore(), KeyContext(0, time_mode=time_mode),
                                   batch_id=-1, partition_id=-1, declaring_only=True)


def check_declarations(processor: AnyProcessor, time_mode: str = "none") -> None:
    """Run `init` (then `close`) on a copy of the processor with a declaring-only handle."""
    from pyspark import cloudpickle

    copy = cloudpickle.loads(cloudpickle.dumps(processor))
    copy.init(declaring_handle(time_mode))
    copy.close()
