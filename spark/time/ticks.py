"""Batches without new input: a streaming source of our own that asks for a batch when timers
could be due, unioned with the query's input.

A stateful step run from foreachBatch gets no batch when no row arrives: Spark only runs
no-data batches for stateful operators of its own plan. So the query reads one more source,
"dstl-ticks", which never returns a row but moves its offset when the driver said, at its last
commit, that the next trigger needs a batch: a processing-time timer is due by now, or the
watermark moved past the one the last batch used (as Spark's event-time no-data batch, which
also closes windows and evicts the state of chained operators). Spark runs a micro-batch
whenever any source's offset moved, so the batch comes at the next trigger with
processingTime, availableNow and once triggers alike.

The driver publishes what it needs in a small local file (the tick source's reader runs in a
Python process beside the driver, so both see the same file); at query start it is written
from the newest commit entry, so it is right after a restart on another host too.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from pyspark_dstl.spark.pyspark_versions import available_now_mixin, register_data_source
from pyspark_dstl.spark.stage.worker_heap import freeze_imported_objects

if TYPE_CHECKING:
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as AvailableNowMixin
else:  # PySpark 4.2+; before, Spark neither has nor asks for it (pyspark_versions.py)
    AvailableNowMixin = available_now_mixin()

SOURCE_NAME = "dstl-ticks"
DEMAND_OPTION = "demandFile"
SCHEMA_OPTION = "schema"
NO_TICK = -1


@dataclass(frozen=True)
class TickDemand:
    """What the newest commit asks of the next trigger."""

    batch_id: int
    next_timer_ms: int | None = None  # processing time: the earliest timer
    watermark_advanced: bool = False  # event time: the next batch has a newer watermark

    @classmethod
    def from_commit(cls, batch_id: int | None, time_extra: Mapping[str, Any] | None
                    ) -> TickDemand:
        if batch_id is None or not time_extra:
            return cls(NO_TICK if batch_id is None else batch_id)
        timers = []
        if time_extra.get("mode") == "processing_time" and \
                time_extra.get("next_timer_ms") is not None:
            timers.append(int(time_extra["next_timer_ms"]))
        if time_extra.get("chain_next_timer_ms") is not None:  # a chained step's timers
            timers.append(int(time_extra["chain_next_timer_ms"]))
        next_timer = min(timers) if timers else None
        advanced = False
        if "next_watermark_ms" in time_extra:
            advanced = int(time_extra["next_watermark_ms"]) > int(time_extra["watermark_ms"])
        return cls(batch_id, None if next_timer is None else int(next_timer), advanced)

    def wants_batch(self, now_ms: int, timers_due_by_ms: int | None = None) -> bool:
        """Whether a batch after `batch_id` is needed now. `timers_due_by_ms` caps the
        processing-time timers considered (availableNow: those due when the query started)."""
        if self.watermark_advanced:
            return True
        if self.next_timer_ms is None:
            return False
        limit = now_ms if timers_due_by_ms is None else min(now_ms, timers_due_by_ms)
        return self.next_timer_ms <= limit


def default_demand_file(location: str, operator: str) -> str:
    """A local file per (checkpoint location, operator), outside it (it is a hint only)."""
    import hashlib

    digest = hashlib.sha256(f"{location}\0{operator}".encode()).hexdigest()[:24]
    return os.path.join(tempfile.gettempdir(), "pyspark-dstl", "ticks", f"{digest}.json")


def write_demand(path: str, demand: TickDemand) -> None:
    """Replace the hint atomically (a reader never sees half a file)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=directory, prefix=".demand-")
    with os.fdopen(handle, "w") as out:
        json.dump(asdict(demand), out)
    os.replace(temp, path)


def read_demand(path: str) -> TickDemand | None:
    try:
        with open(path) as source:
            raw = json.load(source)
        return TickDemand(int(raw["batch_id"]), raw.get("next_timer_ms"),
                          bool(raw.get("watermark_advanced", False)))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no hint yet (or being replaced): no tick this time, the next poll sees it


class TickDataSource(DataSource):
    """Options: demandFile (the driver's hint), schema (the input's schema as JSON, so the
    source can be unioned with the input; it never returns rows)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        freeze_imported_objects()  # planned in a reused Python worker too
        return StructType.fromJson(json.loads(self.options[SCHEMA_OPTION]))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        freeze_imported_objects()  # planned in a reused Python worker too
        return TickReader(self.options[DEMAND_OPTION])


class TickReader(DataSourceStreamReader, AvailableNowMixin):
    """Offsets are {"tick": n}: n is the batch the last tick asked for."""

    def __init__(self, demand_file: str) -> None:
        self._demand_file = demand_file
        self._due_by_ms: int | None = None
        # the offset Spark last planned or committed: PySpark before 4.2 calls latestOffset()
        # without the start offset (after a restart the last one comes as partitions(o, o))
        self._seen: dict = {"tick": NO_TICK}

    def initialOffset(self) -> dict:
        return {"tick": NO_TICK}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        if start is None:
            start = self._seen
        demand = read_demand(self._demand_file)
        if demand is None:
            return start
        wanted = demand.batch_id + 1
        if wanted > int(start.get("tick", NO_TICK)) and \
                demand.wants_batch(int(time.time() * 1000), self._due_by_ms):
            return {"tick": wanted}
        return start

    def prepareForTriggerAvailableNow(self) -> None:
        # "Available now" for timers: processing-time timers due by now, and the event-time
        # batches the input read until now leads to; nothing registered for later.
        self._due_by_ms = int(time.time() * 1000)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        self._seen = end
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return iter(())

    def commit(self, end: dict) -> None:
        self._seen = end


def tick_stream(spark: Any, input_schema: Any, demand_file: str) -> Any:
    """The tick source as a streaming DataFrame with the input's schema."""
    register_data_source(spark, TickDataSource)
    return (spark.readStream.format(SOURCE_NAME)
            .option(DEMAND_OPTION, demand_file)
            .option(SCHEMA_OPTION, input_schema.json())
            .load())
