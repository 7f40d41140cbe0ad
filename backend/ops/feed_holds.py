"""Change feed positions: how far each reader of the changelog has come, and the hold they put
on retention.

A change feed (spark/readers/change_stream.py) reads each committed batch's changes from the
changelog files its commit entry names, so those entries and files must outlive the batch's
retention while a feed still needs them. Each feed records its position (the next batch it
will read) in the checkpoint location, create-only: `feeds/<feed>/<position>.json`, one record
per position, never overwritten; the newest record of a feed is its position, and the feed
deletes its older records once a newer one is written.

The cleanup keeps the newest `minBatchesToRetain` batches as always, and beyond them the
batches the slowest feed still needs, up to `maxBatchesHeldForFeeds` more: a feed that falls
further behind is let go (the cleanup says so in its report), and its next read fails by
name. So a feed never holds back cleanup by more than a fixed number of batches, whatever
happened to it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark_dstl.backend.backend_errors import CorruptCheckpointError
from pyspark_dstl.backend.lineage.naming import check_operator
from pyspark_dstl.changelog.changelog_errors import (
    ChangelogError,
    ObjectExistsError,
    ObjectNotFoundError,
    UploadFailedError,
)
from pyspark_dstl.core.checksummed_json import RecordKind
from pyspark_dstl.materializer.remote import RemoteFiles

FEEDS_PREFIX = "feeds"
MAGIC = "DSTL-FEED-POSITION"
RECORD = RecordKind("change feed position", (MAGIC,), "position", 1, CorruptCheckpointError,
                    max_bytes=64 * 1024)
_RECORD_NAME = re.compile(r"^(0|[1-9][0-9]{0,18})\.json$")


def feed_prefix(feed: str) -> str:
    """Where a feed's position records live; the name is checked like an operator's (it
    names a directory)."""
    return f"{FEEDS_PREFIX}/{check_operator(feed)}/"


def record_position(storage: RemoteFiles, feed: str, position: int) -> str:
    """Record that `feed` will next read batch `position` (create-only: a record already at
    that position, written by an earlier attempt, stands)."""
    if isinstance(position, bool) or not isinstance(position, int) or position < 0:
        raise ValueError(f"change feed {feed!r}: a position is a batch id >= 0, got "
                         f"{position!r}")
    path = f"{feed_prefix(feed)}{position}.json"
    data = RECORD.encode({"feed": feed, "position": position,
                          "created_ms": int(time.time() * 1000)})
    try:
        storage.loop.run(storage.aput(path, data))
    except UploadFailedError as exc:
        if not isinstance(exc.__cause__, ObjectExistsError):
            raise
    return path


def _positions_of(storage: RemoteFiles, prefix: str) -> dict[str, list[int]]:
    """feed -> its recorded positions, ascending (names that are not records are ignored)."""
    found: dict[str, list[int]] = {}
    for info in storage.loop.run(storage.alist(prefix)):
        parts = info.path[len(FEEDS_PREFIX) + 1:].split("/")
        if len(parts) != 2:
            continue
        match = _RECORD_NAME.match(parts[1])
        if match:
            found.setdefault(parts[0], []).append(int(match[1]))
    return {feed: sorted(values) for feed, values in sorted(found.items())}


def feed_positions(storage: RemoteFiles) -> dict[str, int]:
    """Every feed's position: its newest record, read and checked (a damaged one is
    CorruptCheckpointError naming the file)."""
    positions: dict[str, int] = {}
    for feed, values in _positions_of(storage, FEEDS_PREFIX + "/").items():
        path = f"{FEEDS_PREFIX}/{feed}/{values[-1]}.json"
        try:
            data = storage.loop.run(storage.aget(path))
        except ObjectNotFoundError:
            continue  # replaced by a newer record meanwhile: the next cleanup sees it
        _, body = RECORD.decode(data, path)
        if body.get("position") != values[-1] or body.get("feed") != feed:
            raise CorruptCheckpointError(f"change feed position {path!r} holds feed "
                                         f"{body.get('feed')!r} at {body.get('position')!r}: "
                                         f"the file was renamed or damaged")
        positions[feed] = values[-1]
    return positions


def forget_other_positions(storage: RemoteFiles, feed: str, position: int) -> int:
    """Delete the feed's records other than `position` (written just before): the older ones
    once it moved on, and higher ones of an earlier life of a feed started anew under the
    same name. The number deleted."""
    prefix = feed_prefix(feed)
    older = [f"{prefix}{value}.json"
             for value in _positions_of(storage, prefix).get(feed, []) if value != position]
    if older:
        try:
            storage.loop.run(storage.adelete_many(older))
        except ChangelogError:
            return 0  # a later call deletes them; they only cost a listing entry each
    return len(older)


@dataclass(frozen=True)
class Retention:
    """How many of the newest committed batches a cleanup keeps: `retain` as asked, more for
    the feeds in `held` (feed -> position), none for the feeds in `released`, which fell
    further behind than the limit allows."""

    batches: int
    held: Mapping[str, int] = field(default_factory=dict)
    released: Mapping[str, int] = field(default_factory=dict)


def retention_with_feeds(batch_ids: Sequence[int], retain: int,
                         positions: Mapping[str, int], limit: int) -> Retention:
    """The batches to keep so every feed within `limit` batches beyond `retain` still finds
    the batches from its position on."""
    held: dict[str, int] = {}
    released: dict[str, int] = {}
    batches = retain
    for feed, position in sorted(positions.items()):
        needed = sum(1 for batch in batch_ids if batch >= position)
        if needed <= retain:
            continue
        if needed <= retain + limit:
            held[feed] = position
            batches = max(batches, needed)
        else:
            released[feed] = position
    return Retention(batches, held, released)
