"""Reads through Spark's state data sources (`statestore`, `state-metadata`) in a shape two
engines' checkpoints can be compared in: the schema, the rows as plain values in a fixed
order, or the error's condition and text with the checkpoint's path taken out.

Processing time differs between two runs of the same query, so a TTL expiry and a
processing-time timer are compared by rule, not by value: `Windows` records when each step
of a run ran, and an expiry `t` becomes ("step", i, d) when t - d falls in step i's window
for the duration d the processor uses. Two engines agree when the same step wrote it with the
same duration.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TTL_FIELD = "ttlExpirationMs"
TIMER_FIELD = "expiration_timestamp_ms"


@dataclass
class Windows:
    """[start, end] in epoch ms of each step (one batch) of one engine's run."""

    steps: list[tuple[int, int]] = field(default_factory=list)

    def label(self, expiry: int, durations: Iterable[int]) -> Any:
        for duration in durations:
            for index, (start, end) in enumerate(self.steps):
                if start <= expiry - duration <= end:
                    return ["step", index, duration]
        return ["unexplained", expiry]


@dataclass(frozen=True)
class Read:
    """One read's outcome: the schema JSON and rows, or the error."""

    schema: str | None
    rows: list[Any] | None
    error: tuple[str | None, str] | None = None


def plain(value: Any, expiry: Callable[[int], Any] | None = None, name: str = "") -> Any:
    """Rows, structs, arrays and maps as JSON-comparable values; expiries relabelled."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {key: plain(item, expiry, key) for key, item in value.asDict().items()}
    if isinstance(value, dict):
        return sorted(([plain(k, expiry), plain(v, expiry)] for k, v in value.items()),
                      key=json.dumps)
    if isinstance(value, list | tuple):
        return [plain(item, expiry) for item in value]
    if expiry is not None and name in (TTL_FIELD, TIMER_FIELD) and isinstance(value, int):
        return expiry(value)
    return value


def read(spark: Any, source: str, checkpoint: Path, expiry: Callable[[int], Any] | None = None,
         **options: Any) -> Read:
    reader = spark.read.format(source)
    for key, value in options.items():
        reader = reader.option(key, value)
    try:
        df = reader.load(str(checkpoint))
        rows = [plain(row, expiry) for row in df.collect()]
    except Exception as exc:  # both engines' errors are compared as text
        return Read(None, None, error_of(exc, checkpoint))
    return Read(df.schema.json(), sorted(rows, key=json.dumps))


def error_of(exc: BaseException, checkpoint: Path) -> tuple[str | None, str]:
    """(condition, first line) with the checkpoint's path replaced by <ckpt>."""
    condition = getattr(exc, "getCondition", lambda: None)()
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    for form in (checkpoint.as_uri(), "file:" + str(checkpoint), str(checkpoint)):
        text = text.replace(form, "<ckpt>")
    return condition, text


def timed_step(windows: Windows, run: Callable[[], None]) -> None:
    started = int(time.time() * 1000)
    run()
    windows.steps.append((started, int(time.time() * 1000)))


def metadata_rows(spark: Any, checkpoint: Path, **options: Any) -> list[Mapping[str, Any]]:
    """state-metadata rows with operatorProperties parsed."""
    reader = spark.read.format("state-metadata")
    for key, value in options.items():
        reader = reader.option(key, value)
    rows = [row.asDict() for row in reader.load(str(checkpoint)).collect()]
    return [{**row, "operatorProperties": json.loads(row["operatorProperties"])}
            if row["operatorProperties"] else row for row in rows]


def run_timed_steps(spark: Any, scenario: Any, workspace: Any,
                    engines: tuple[str, ...] = ("pyspark", "dropin")) -> dict[str, Windows]:
    """tws_compare.run_steps (a processing-time scenario, engines in lockstep, one batch per
    step), recording each engine's step windows."""
    from tests.support.tws_compare import (
        COMPARE_SETTINGS,
        ENGINES,
        Run,
        await_query,
        input_stream,
        session_conf,
        write_input,
    )

    assert scenario.pauses is not None
    windows = {name: Windows() for name in engines}
    runs = {name: Run(name, checkpoint=workspace.checkpoint(name)) for name in engines}
    processors = {name: scenario.processor() for name in engines}
    with session_conf(spark, COMPARE_SETTINGS):
        for index, (pause, frame) in enumerate(zip(scenario.pauses, scenario.batches,
                                                   strict=True)):
            time.sleep(pause)
            write_input(workspace.inputs, index, frame)
            for name in engines:
                engine, run = ENGINES[name], runs[name]
                run.runs.append([])

                def step(engine: Any = engine, run: Any = run, name: str = name) -> None:
                    with engine.settings(spark):
                        query = engine.start(input_stream(spark, scenario, workspace.inputs),
                                             scenario, processors[name],
                                             workspace.checkpoint(name), run.sink,
                                             {"once": True})
                        await_query(query)

                timed_step(windows[name], step)
    return windows
