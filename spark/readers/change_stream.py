"""The "dstl-changes" streaming source: each committed batch's state changes of one state
variable (or the timers), once, in batch order, as Spark's change feed shows them.

    (spark.readStream.format("dstl-changes")
        .option("stateVarName", "count").option("feedName", "mirror")
        .load(producer_location))

The offsets are the producer's batch ids, so a consumer query resumes from its own checkpoint
and, into Spark's file sink, delivers every change exactly once whichever query is killed. It
reads only what commit entries name (change_feed.py), and only batches the producer can no
longer re-execute: the newest committed batch waits until Spark's engine of the producer has
committed it too (its `commits/<batch>` under the producer's engine checkpoint), since a
producer restarted before that runs the batch again and commits it anew. Under availableNow
it reads what was settled when the consuming query started (SupportsTriggerAvailableNow).

The feed records its position in the producer's location (backend/ops/feed_holds.py) when
it starts and after each consumer batch, so the producer's cleanup keeps the batches it still
needs, up to `spark.dstl.stateStore.maxBatchesHeldForFeeds` beyond the retained ones; a feed
further behind fails by name. Rows have the schema Spark's `readChangeFeed` gives the variable
at the feed's start; with `flattenCollectionTypes=false` a list's changes are one row per
key holding its new list (a sink that does not keep row order then keeps lists whole).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)

from pyspark_dstl.backend.ops.feed_holds import (
    feed_positions,
    forget_other_positions,
    record_position,
)
from pyspark_dstl.changelog.changelog_errors import ChangelogError
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.spark.pyspark_versions import available_now_mixin
from pyspark_dstl.spark.readers import statestore_options as names
from pyspark_dstl.spark.readers.change_feed import (
    ChangeFeedError,
    ChangePartition,
    ChangeRows,
    change_partitions,
)
from pyspark_dstl.spark.readers.state_location import RETENTION_KEY, StateLocation, state_url
from pyspark_dstl.spark.readers.statestore import read_target, settings_of
from pyspark_dstl.spark.readers.statestore_options import StateSourceOptions
from pyspark_dstl.spark.readers.statestore_schema import LIST, state_schema
from pyspark_dstl.spark.stage.worker_heap import freeze_imported_objects

if TYPE_CHECKING:
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as AvailableNowMixin
else:  # PySpark 4.2+; before, Spark wraps the source only when its setting says so
    AvailableNowMixin = available_now_mixin()

SOURCE_NAME = "dstl-changes"
FEED_NAME = "feedName"
STARTING_BATCH_ID = "startingBatchId"
ENGINE_CHECKPOINT = "engineCheckpointLocation"
HOLD_KEY = "spark.dstl.stateStore.maxBatchesHeldForFeeds"
ENGINE_COMMITS = "commits/"


def _option(given: Mapping[str, str], name: str) -> str | None:
    return given.get(name.lower())


class ChangeStreamSource(DataSource):
    """Options: path (the producer's checkpoint location), stateVarName or
    readRegisteredTimers=true, feedName (required: names the feed's position in the
    producer's location), operatorId (0), startingBatchId (0), flattenCollectionTypes,
    engineCheckpointLocation (the producer's, default <path>/engine), settings."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> Any:
        freeze_imported_objects()  # planned in a reused Python worker too
        return FeedPlan(self.options).schema

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        freeze_imported_objects()  # planned in a reused Python worker too
        return ChangeStreamReader(dict(self.options))


class FeedPlan:
    """The feed's options checked against the producer's location at the start: what it
    reads, in which schema (the producer's at the newest committed batch)."""

    def __init__(self, given: Mapping[str, Any]) -> None:
        options = names.lowered(given)
        path = _option(options, names.PATH)
        if path is None:
            raise ChangeFeedError(f"{SOURCE_NAME}: give the producer's checkpoint location, "
                                  f"load(location)")
        feed = _option(options, FEED_NAME)
        if not feed or not feed.strip():
            raise ChangeFeedError(
                f"{SOURCE_NAME} option {FEED_NAME}: give this feed a name of its own, e.g. "
                f".option('{FEED_NAME}', 'mirror'): its position is kept under it in the "
                f"producer's location, so that cleanup keeps what it has not read yet")
        self.feed = feed.strip()
        start = _option(options, STARTING_BATCH_ID) or "0"
        if not names.INTEGER.match(start) or int(start) < 0:
            raise ChangeFeedError(f"{SOURCE_NAME} option {STARTING_BATCH_ID}: a batch id >= "
                                  f"0 is expected, got {start!r}")
        self.start = int(start)
        self.settings = settings_of(given)
        flatten = names.FLATTEN_COLLECTION_TYPES.lower()
        self.whole_lists = (options.get(flatten) or "true").strip().lower() == "false"
        with StateLocation(path, self.settings) as location:
            self.url = location.url
            newest = location.newest_batch()
            if newest is None:
                raise ChangeFeedError(f"{SOURCE_NAME}: {location.location} has no committed "
                                      f"batch yet; start the feed once the producer has "
                                      f"committed its first batch")
            checked = {**options, names.BATCH_ID.lower(): str(newest)}
            checked.pop(flatten, None)
            parsed: StateSourceOptions = names.parse_options(checked, location)
            operator = location.operator(newest, parsed.operator_id)
            if operator is None:
                raise ChangeFeedError(f"{SOURCE_NAME} option {names.OPERATOR_ID}: batch "
                                      f"{newest} has no stateful operator "
                                      f"{parsed.operator_id}")
            self.operator_id = parsed.operator_id
            self.target = read_target(parsed, operator, location.location)
            self.rows = ChangeRows(location.url, self.settings, self.target, operator.history,
                                   tuple(operator.key_types()),
                                   self.whole_lists and self.target.kind == LIST)
            self.schema = state_schema(operator.grouping_key(), self.target, True, True,
                                       whole_lists=self.rows.whole_lists)
        engine = _option(options, ENGINE_CHECKPOINT)
        self.engine_url = state_url(engine) if engine else self.url.rstrip("/") + "/engine"


class ChangeStreamReader(DataSourceStreamReader, AvailableNowMixin):
    """Offsets are {"batch": b}: the next producer batch to read.

    Under availableNow the feed reads up to the producer batches settled when the query
    started (its target), in as many batches as Spark runs, also when a restart first runs an
    unfinished batch again: Spark runs a source that does not say it supports availableNow as
    one batch, which after such a restart is that unfinished batch alone."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.plan = FeedPlan(options)
        self._location: StateLocation | None = None
        self._engine: ChangelogService | None = None
        # the end of the last range handed out, where the next one starts: the start for a
        # new query (initialOffset), else the feed's recorded position (its last commit)
        self._latest: int | None = None
        self._target: int | None = None  # availableNow: the end it stops at

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_location"] = None  # storage clients stay on the driver
        state["_engine"] = None
        return state

    @property
    def location(self) -> StateLocation:
        if self._location is None:
            self._location = StateLocation(self.plan.url, self.plan.settings)
        return self._location

    def initialOffset(self) -> dict[str, int]:
        start = self.plan.start
        self._check_retained(start)
        storage = self.location.storage
        record_position(storage, self.plan.feed, start)
        forget_other_positions(storage, self.plan.feed, start)  # a feed started anew
        self._latest = start
        return {"batch": start}

    def latestOffset(self, start: dict[str, int] | None = None,
                     limit: Any = None) -> dict[str, int]:
        """The end of the settled batches, at most the availableNow target. PySpark 4.0 and
        4.1 call it without arguments, 4.2+ with the start offset and Spark's read limit
        (the feed reads all that is settled, whatever the limit)."""
        latest = self._settled_end()
        if self._target is not None:
            latest = min(latest, self._target)
            if start is not None:
                latest = max(latest, int(start["batch"]))
        return {"batch": latest}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._settled_end()

    def _settled_end(self) -> int:
        """One past the newest producer batch it can no longer re-execute (at least the
        feed's recorded position)."""
        if self._latest is None:
            recorded = feed_positions(self.location.storage).get(self.plan.feed)
            self._latest = self.plan.start if recorded is None else recorded
        batches = self.location.batch_ids(refresh=True)
        if batches:
            newest = batches[-1]
            settled = newest if self._engine_committed(newest) else newest - 1
            self._latest = max(self._latest, settled + 1)
        return self._latest

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        first, last = int(start["batch"]), int(end["batch"]) - 1
        if last < first:
            return []
        self._check_retained(first)
        return list(change_partitions(self.location, self.plan.operator_id, first, last))

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, ChangePartition)
        freeze_imported_objects()
        yield from self.plan.rows.rows(partition)

    def commit(self, end: dict[str, int]) -> None:
        position = int(end["batch"])
        storage = self.location.storage
        record_position(storage, self.plan.feed, position)
        forget_other_positions(storage, self.plan.feed, position)

    def stop(self) -> None:
        for client in (self._location, self._engine):
            if client is not None:
                client.close()
        self._location = self._engine = None

    # --- what the producer has -------------------------------------------------------------

    def _check_retained(self, batch_id: int) -> None:
        """The feed's next batch must still be committed (or not committed yet)."""
        location = self.location
        batches = location.batch_ids(refresh=True)
        if not batches or batch_id > batches[-1] or batch_id in set(batches):
            return
        raise ChangeFeedError(
            f"change feed {self.plan.feed!r} on {location.location}: batch {batch_id}, which it "
            f"reads next, is no longer retained (the producer keeps {batches[0]}..{batches[-1]}):"
            f" the producer's cleanup keeps {RETENTION_KEY} batches and at most {HOLD_KEY} more "
            f"for the feeds behind; raise {HOLD_KEY} on the producer, or start the feed anew "
            f"(a new checkpoint) with {STARTING_BATCH_ID}={batches[0]} after copying the state "
            f"reader's view of batch {batches[0] - 1}")

    def _engine_committed(self, batch_id: int) -> bool:
        """Whether the producer's engine committed `batch_id` (so it is never run again)."""
        if self._engine is None:
            self._engine = ChangelogService(self.plan.engine_url,
                                            self.location.storage.settings)
        try:
            infos = self._engine.loop.run(self._engine.alist(ENGINE_COMMITS))
        except ChangelogError:
            return False
        names_found = {info.path[len(ENGINE_COMMITS):] for info in infos}
        return str(batch_id) in names_found
