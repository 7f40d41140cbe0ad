"""Running PySpark-style processors on this backend in tests: inputs written as one parquet
file per batch, a stream over them, and a sink that keeps each batch's rows."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark_dstl.spark import StatefulStream

Outputs = dict[int, list[dict[str, Any]]]


def write_inputs(directory: Path, frames: list[Any], start: int = 0) -> None:
    """One parquet file per frame; timestamps in microseconds (Spark cannot read pandas'
    nanoseconds) and modification times one second apart so batches keep their order."""
    directory.mkdir(parents=True, exist_ok=True)
    base = time.time() - 3600
    for offset, frame in enumerate(frames):
        path = directory / f"part-{start + offset:05d}.parquet"
        frame.to_parquet(path, index=False, coerce_timestamps="us",
                         allow_truncated_timestamps=True)
        stamp = base + start + offset
        os.utime(path, (stamp, stamp))


def input_stream(spark: Any, directory: Path, schema: str) -> Any:
    """A streaming DataFrame over the parquet files of `directory`, one file per batch."""
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(
        str(directory))


def keeping_sink(outputs: Outputs) -> Callable[[Any, int], None]:
    """Keeps each batch's rows as dicts, sorted; a replayed batch replaces its rows."""

    def sink(df: Any, batch_id: int) -> None:
        rows = [row.asDict() for row in df.collect()]
        outputs[batch_id] = sorted(rows, key=lambda r: tuple(str(v) for v in r.values()))

    return sink


def run_to_end(stream: StatefulStream, outputs: Outputs) -> Outputs:
    """Run the stream with an availableNow trigger until it has read everything."""
    query = stream.foreach_batch(keeping_sink(outputs)).start(trigger={"availableNow": True})
    query.awaitTermination()
    error = query.exception()
    if error is not None:
        raise AssertionError(f"the query failed: {error}")
    return outputs


def failure_of(stream: StatefulStream) -> str:
    """The error message of a stream expected to fail in its first batch."""
    query = stream.foreach_batch(keeping_sink({})).start(trigger={"availableNow": True})
    try:
        query.awaitTermination()
    except Exception as exc:  # StreamingQueryException
        return str(exc)
    error = query.exception()
    if error is None:
        raise AssertionError("the query did not fail")
    return str(error)


def all_rows(outputs: Outputs) -> list[dict[str, Any]]:
    return [row for batch_id in sorted(outputs) for row in outputs[batch_id]]


class RowFileWriter:
    """A foreach writer (Spark's open/process/close contract) that writes each partition's rows
    of each batch as JSON lines to its own file in `directory`."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._lines: list[str] = []
        self._name = ""

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self._name = f"{self.directory}/batch-{epoch_id}-partition-{partition_id}.jsonl"
        self._lines = []
        return True

    def process(self, row: Any) -> None:
        self._lines.append(json.dumps(list(row)))

    def close(self, error: BaseException | None) -> None:
        if error is None and self._lines:
            with open(self._name, "w") as out:
                out.write("\n".join(self._lines) + "\n")
