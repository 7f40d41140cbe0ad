"""PySpark processors and helpers the move tests share (tests/spark/moves/): they live here so
that executors import them by module name.

`Journey`: value, list and map state with TTL, a typed value without TTL and processing-time
timers; `SessionRows`: Row-based sessions in event time with event-time timers.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

SHORT_MS = 1_000  # a processing-time timer that is due at the next step
LONG_MS = 3_600_000  # TTLs and timers that never expire within a test


class Journey(StatefulProcessor):
    """Value, list and map state with TTL, a typed value without TTL, processing-time timers.

    Per key and batch: the running count, the list of values seen (cleared when a short timer
    fires), hits per page (value % 3), and the key's previous "last" value (a timestamp, a
    decimal and a map among its fields), shown before it is replaced, so the first batch here
    reads what was imported. A value divisible by 5 arms a short timer; every key keeps one long
    timer. Outputs carry no wall clock."""

    OUTPUT = ("user string, kind string, count long, items long, item_sum long, pages long, "
              "hits long, last string")
    LAST = "v long, note string, at timestamp, price decimal(10,2), tags map<string,long>"

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.count = handle.getValueState("count", "n long", LONG_MS)
        self.items = handle.getListState("items", "v long", LONG_MS)
        self.pages = handle.getMapState("pages", "page string", "hits long", LONG_MS)
        self.last = handle.getValueState("last", self.LAST)

    def _row(self, key: Any, kind: str, last: Any) -> pd.DataFrame:
        count = self.count.get()
        items = [item[0] for item in self.items.get()]
        hits = [value[0] for value in self.pages.values()]
        shown = "-" if last is None else (
            f"{last[0]}|{last[1]}|{last[2].isoformat()}|{last[3]}|{sorted(last[4].items())}")
        return pd.DataFrame({"user": [key[0]], "kind": [kind],
                             "count": [count[0] if count else 0], "items": [len(items)],
                             "item_sum": [sum(items)], "pages": [len(hits)],
                             "hits": [sum(hits)], "last": [shown]})

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows)).sort_values("v")
        values = [int(v) for v in frame["v"]]
        previous = self.last.get()
        before = self.count.get()
        self.count.update(((before[0] if before else 0) + len(values),))
        self.items.appendList([(v,) for v in values])
        for v in values:
            page = (f"p{v % 3}",)
            hits = self.pages.getValue(page)
            self.pages.updateValue(page, ((hits[0] if hits else 0) + 1,))
        v = values[-1]
        self.last.update((v, f"last of {len(values)}",
                          dt.datetime(2024, 5, 1, 12, 0, 0, 250_000) + dt.timedelta(seconds=v),
                          Decimal(v) / 4, {"n": len(values), "v": v}))
        now = timerValues.getCurrentProcessingTimeInMs()
        if any(v % 5 == 0 for v in values):
            self.handle.registerTimer(now + SHORT_MS)
        if not any(expiry > now + SHORT_MS for expiry in self.handle.listTimers()):
            self.handle.registerTimer(now + LONG_MS)
        yield self._row(key, "rows", previous)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        self.items.clear()
        yield self._row(key, "timer", self.last.get())

    def close(self) -> None:
        pass


class SessionRows(StatefulProcessor):
    """Row-based sessions in event time: a session closes GAP_MS after its newest event."""

    OUTPUT = "user string, kind string, events long, total long, first_ms long"
    GAP_MS = 5_000

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.total = handle.getValueState("total", "events long, total long")
        self.times = handle.getListState("times", "ms long")

    def _row(self, key: Any, kind: str) -> Row:
        total = self.total.get() or (0, 0)
        times = [item[0] for item in self.times.get()]
        return Row(user=key[0], kind=kind, events=total[0], total=total[1],
                   first_ms=min(times) if times else -1)

    def handleInputRows(self, key: Any, rows: Iterator[Row],
                        timerValues: TimerValues) -> Iterator[Row]:
        events = sorted(rows, key=lambda row: (row["ts"], row["v"]))
        stamps = [int(row["ts"].timestamp() * 1000) for row in events]
        total = self.total.get() or (0, 0)
        self.total.update((total[0] + len(events), total[1] + sum(r["v"] for r in events)))
        self.times.appendList([(ms,) for ms in stamps])
        for expiry in list(self.handle.listTimers()):
            self.handle.deleteTimer(expiry)
        newest = max(item[0] for item in self.times.get())
        self.handle.registerTimer(newest + self.GAP_MS)
        yield self._row(key, "open")

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Row]:
        row = self._row(key, "closed")
        self.total.clear()
        self.times.clear()
        yield row

    def close(self) -> None:
        pass


def spark_state(spark: Any, checkpoint: Path, batch_id: int, **options: str) -> list[Any]:
    reader = spark.read.format("statestore").option("batchId", batch_id)
    for name, value in options.items():
        reader = reader.option(name, value)
    return list(reader.load(str(checkpoint)).collect())


JourneyEntries = dict[tuple[str, str, str], Any]


def journey_entries_here(frame: Any) -> JourneyEntries:
    """A Journey's state as this backend's state reader gives it (a pandas frame): (variable,
    key, map key or timer) -> (value, TTL expiry), a timer -> its time."""
    import json

    entries: JourneyEntries = {}
    for row in frame.itertuples():
        key = json.loads(row.key)[0]
        if row.kind == "timer":
            entries[("timers", key, row.value)] = int(row.value)
        elif row.kind == "map":
            entries[(row.state_variable, key, row.map_key)] = (json.loads(row.value)[0],
                                                               int(row.expires_at_ms))
        elif row.state_variable in ("count", "items"):
            values = json.loads(row.value)
            entries[(row.state_variable, key, "")] = (
                [v[0] for v in values] if row.kind == "list" else values[0],
                int(row.expires_at_ms))
    return entries


def journey_entries_in_spark(spark: Any, checkpoint: Path, batch_id: int,
                             **options: str) -> JourneyEntries:
    """The same entries of a Spark checkpoint, read by Spark's own `statestore` source
    (`options`: e.g. the operatorId of a chained step)."""
    import json

    entries: JourneyEntries = {}
    for row in spark_state(spark, checkpoint, batch_id, readRegisteredTimers="true", **options):
        expiry = row["expiration_timestamp_ms"]
        entries[("timers", row["key"][0], str(expiry))] = expiry
    for row in spark_state(spark, checkpoint, batch_id, stateVarName="pages", **options):
        entries[("pages", row["key"][0], json.dumps(list(row["user_map_key"])))] = (
            row["user_map_value"]["value"]["hits"], row["user_map_value"]["ttlExpirationMs"])
    for row in spark_state(spark, checkpoint, batch_id, stateVarName="count", **options):
        entries[("count", row["key"][0], "")] = (row["value"]["value"]["n"],
                                                row["value"]["ttlExpirationMs"])
    for row in spark_state(spark, checkpoint, batch_id, stateVarName="items",
                           flattenCollectionTypes="false", **options):
        elements = row["list_value"]
        entries[("items", row["key"][0], "")] = ([e["value"]["v"] for e in elements],
                                                min(e["ttlExpirationMs"] for e in elements))
    return entries
