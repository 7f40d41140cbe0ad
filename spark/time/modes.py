"""The time modes, named once: the words this library uses, PySpark's spellings, and the time
that a mode without such a time reads."""

from __future__ import annotations

from typing import Any

from pyspark_dstl.core.errors import ConfigError

NO_TIME_MODE = "none"
PROCESSING_TIME = "processing_time"
EVENT_TIME = "event_time"
TIME_MODES = (NO_TIME_MODE, PROCESSING_TIME, EVENT_TIME)
NO_TIME = -1  # what a time of a mode that has no such time reads (as PySpark's TimerValues)
# PySpark's spelling of each mode (timeMode="ProcessingTime", ...)
PYSPARK_WORDS = {NO_TIME_MODE: "None", PROCESSING_TIME: "ProcessingTime",
                 EVENT_TIME: "EventTime"}
_FOLDED = {mode.replace("_", ""): mode for mode in TIME_MODES}


def time_mode_of(value: Any) -> str:
    """"processing_time", "ProcessingTime" and "processingtime" all name the same mode."""
    word = str(value).strip().lower().replace("_", "").replace(" ", "")
    if word not in _FOLDED:
        raise ConfigError(f"time_mode: expected none, processing_time or event_time (PySpark: "
                          f"None, ProcessingTime, EventTime), got {value!r}")
    return _FOLDED[word]
