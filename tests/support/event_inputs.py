"""Event-time inputs for the Spark tests: one parquet file per batch, in order."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pandas as pd

BASE = pd.Timestamp("2026-01-01T00:00:00Z")


def events(*pairs: tuple[str, float]) -> pd.DataFrame:
    """Rows (user, BASE + seconds)."""
    return pd.DataFrame({"user": [p[0] for p in pairs],
                         "ts": [BASE + pd.Timedelta(seconds=p[1]) for p in pairs]})


def write_event_files(directory: Path, frames: list[pd.DataFrame], start: int = 0) -> None:
    """One file per frame with increasing modification times (Spark's file source order);
    timestamps in microseconds, which Spark reads (pandas' nanoseconds it cannot)."""
    directory.mkdir(parents=True, exist_ok=True)
    base = time.time() - 3600
    for offset, frame in enumerate(frames):
        path = directory / f"part-{start + offset:05d}.parquet"
        frame.to_parquet(path, index=False, coerce_timestamps="us",
                         allow_truncated_timestamps=True)
        stamp = base + start + offset
        os.utime(path, (stamp, stamp))


def event_stream(spark: Any, directory: Path, schema: str = "user string, ts timestamp"
                 ) -> Any:
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(
        str(directory))


def epoch_ms(seconds: float) -> int:
    return int((BASE + pd.Timedelta(seconds=seconds)).value // 1_000_000)
