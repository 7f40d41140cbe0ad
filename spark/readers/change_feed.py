"""A committed batch's state changes, read from the changelog: what the change feed shows.

A batch's changes in one state store are the change sets of the commit its commit entry
names: version v, unique id u, found in the files that commit wrote (`{v}_{u}[.n].changelog`,
usually named by the segments of its StoreCommit's changelog handle; a commit that adopted a
synchronous snapshot has an empty handle, and its files are found by name). Every change set
must carry the marker (v, u, base id) of that commit: a change set of any other attempt, an
aborted or uncommitted one, is never read. Only change sets named by commit entries are read.

The transaction cache keeps one write per key per flush, and a commit may flush more than
once (a full cache, a scan), so the changelog holds each key's last write per flush. The
feed shows each key's last write per batch: the net change, whatever the flushes were (Spark
shows every write; docs/state-data.md compares them).
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import InputPartition

from pyspark_dstl.backend.backend_errors import CorruptCheckpointError, LineageError
from pyspark_dstl.backend.engines.columns import decode_change_blocks
from pyspark_dstl.backend.engines.records import OP_DELETE
from pyspark_dstl.backend.lineage.naming import parse_checkpoint_name, store_dir
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.changelog import ChangeSet
from pyspark_dstl.changelog.changelog_errors import ChangelogError, ObjectNotFoundError
from pyspark_dstl.changelog.changelog_handle import ChangelogHandle, Segment
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.files import read_file_log
from pyspark_dstl.spark.codec.schema_history import SchemaHistory
from pyspark_dstl.spark.readers import state_data_errors as errors
from pyspark_dstl.spark.readers.spark_rows import Row, RowMaker
from pyspark_dstl.spark.readers.state_location import StateLocation
from pyspark_dstl.spark.readers.statestore_schema import ReadTarget
from pyspark_dstl.spark.spark_errors import DstlSparkError, StateDecodingError

Writes = dict[bytes, bytes | None]  # key -> its last value in the batch (None: removed)


class ChangeFeedError(DstlSparkError, ValueError):
    """A change feed cannot go on as asked: an option is missing or wrong, the batches it
    needs are no longer retained by the producer, or the producer's state schema changed
    after the feed started; names the option, the setting or the variable."""


@dataclass(frozen=True)
class BatchCommit:
    """What reading one store's changes of one batch needs (plain data, shipped to tasks):
    the commit (store, version, unique id, base id) and the segments of the files it wrote
    (None: find them by name)."""

    batch_id: int
    store_id: str
    version: int
    unique_id: str
    base_unique_id: str | None
    segments: tuple[Segment, ...] | None

    @classmethod
    def of(cls, batch_id: int, info: StoreCommit) -> BatchCommit:
        own = tuple(segment for segment in info.changelog.segments
                    if _label_of(segment.path) == (info.version, info.unique_id))
        return cls(batch_id, info.store_id, info.version, info.unique_id,
                   info.base_unique_id, own or None)

    def to_dict(self) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "store_id": self.store_id, "version": self.version,
                "unique_id": self.unique_id, "base_unique_id": self.base_unique_id,
                "segments": None if self.segments is None
                else [segment.to_dict() for segment in self.segments]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchCommit:
        segments = data.get("segments")
        return cls(int(data["batch_id"]), str(data["store_id"]), int(data["version"]),
                   str(data["unique_id"]),
                   None if data["base_unique_id"] is None else str(data["base_unique_id"]),
                   None if segments is None else tuple(Segment.from_dict(s) for s in segments))


def _label_of(path: str) -> tuple[int, str] | None:
    name = parse_checkpoint_name(posixpath.basename(path))
    return None if name is None or name.kind != "changelog" else (name.version, name.unique_id)


def batch_writes(storage: ChangelogService, commit: BatchCommit,
                 column_families: Collection[str]) -> dict[str, Writes]:
    """cf -> the last write of each key in the batch, for the given column families."""
    found: dict[str, Writes] = {cf: {} for cf in column_families}
    for change_set in _change_sets(storage, commit):
        for _, payload in change_set.entries:
            where = f"change set {change_set.sqn} of store {commit.store_id!r}"
            marker, blocks = decode_change_blocks(payload, where)
            if (marker.version, marker.unique_id, marker.base_unique_id) != (
                    commit.version, commit.unique_id, commit.base_unique_id):
                raise LineageError(
                    f"store {commit.store_id!r}: {where} holds changes of version "
                    f"{marker.version} ({marker.unique_id!r}, built on "
                    f"{marker.base_unique_id!r}), not of the commit of batch "
                    f"{commit.batch_id} (version {commit.version}, {commit.unique_id!r})")
            for block in blocks:
                writes = found.get(block.cf)
                if writes is None:
                    continue
                deleted = (block.ops == OP_DELETE).tolist()
                for key, value, gone in zip(block.key_list(), block.value_list(), deleted,
                                            strict=True):
                    writes[bytes(key)] = None if gone else bytes(value)  # type: ignore[arg-type]
    return found


def _change_sets(storage: ChangelogService, commit: BatchCommit) -> Iterator[ChangeSet]:
    """The commit's change sets, each SQN once, in SQN order."""
    if commit.segments is not None:
        segments = sorted(commit.segments, key=lambda s: s.from_sqn)
        handle = ChangelogHandle.of(commit.store_id, segments[0].from_sqn,
                                    segments[-1].to_sqn, segments)
        try:
            yield from storage.reader().read(handle)
        except ObjectNotFoundError as exc:
            raise LineageError(f"store {commit.store_id!r}: changelog file {exc.path!r} of "
                               f"batch {commit.batch_id} is missing") from exc
        return
    yield from _change_sets_by_name(storage, commit)


def _change_sets_by_name(storage: ChangelogService, commit: BatchCommit) -> Iterator[ChangeSet]:
    """The change sets of the commit's own files, found by their names: a change set that an
    upload retried appears twice and is read once."""
    prefix = store_dir(commit.store_id) + "/"
    try:
        infos = storage.loop.run(storage.alist(prefix))
    except ChangelogError as exc:
        raise LineageError(f"store {commit.store_id!r}: cannot list {prefix!r}: {exc}") from exc
    own = []
    for info in infos:
        name = parse_checkpoint_name(posixpath.basename(info.path))
        if name is not None and name.kind == "changelog" and \
                (name.version, name.unique_id) == (commit.version, commit.unique_id):
            own.append((name.part, info.path))
    by_sqn: dict[int, ChangeSet] = {}
    for _, path in sorted(own):
        try:
            log = read_file_log(storage, path, commit.store_id)
        except ObjectNotFoundError as exc:
            raise LineageError(f"store {commit.store_id!r}: changelog file {path!r} of batch "
                               f"{commit.batch_id} disappeared") from exc
        except ChangelogError as exc:
            raise CorruptCheckpointError(f"store {commit.store_id!r}: {exc}") from exc
        for _, change_set in log.located:
            by_sqn.setdefault(change_set.sqn, change_set)
    for sqn in sorted(by_sqn):
        yield by_sqn[sqn]


@dataclass
class ChangePartition(InputPartition):
    """One state partition's commits over a range of batches, oldest first, each with its
    batch's partition count and key layout (a rescale changes them)."""

    partition: int
    commits: tuple[tuple[BatchCommit, int, bool], ...] = field(default=())


def change_partitions(location: StateLocation, operator_id: int, start: int,
                      end: int) -> list[ChangePartition]:
    """The partitions that read batches start..end (inclusive) of one operator; a batch that
    is not committed any more is Spark's STDS_COMMITTED_BATCH_UNAVAILABLE, naming why."""
    by_partition: dict[int, list[tuple[BatchCommit, int, bool]]] = {}
    for batch_id in range(start, end + 1):
        why = location.missing_batch(batch_id)
        if why is not None:
            raise errors.no_committed_batch(location.location, why)
        operator = location.operator(batch_id, operator_id)
        if operator is None:
            continue  # the operator did not exist yet at this batch: no changes
        for partition, info in sorted(operator.stores.items()):
            by_partition.setdefault(partition, []).append(
                (BatchCommit.of(batch_id, info), operator.num_partitions, operator.grouped))
    return [ChangePartition(p, tuple(commits)) for p, commits in sorted(by_partition.items())]


@dataclass(frozen=True)
class ChangeRows:
    """How a task turns one partition's commits into change rows (plain data, shipped with
    the reader): `whole_lists` shows a list's new value as one array per key (the stream's
    flattenCollectionTypes=false) instead of Spark's update and append rows."""

    url: str
    settings: Mapping[str, str]
    target: ReadTarget
    history: SchemaHistory | None
    key_types: tuple[str, ...]
    whole_lists: bool = False

    def rows(self, partition: ChangePartition) -> Iterator[Row]:
        from pyspark_dstl.spark.stage.open_stores import executor_stores

        storage = executor_stores().backend(dict(self.settings)).context(self.url).storage
        cf = self.target.column_family
        for commit, num_partitions, grouped in partition.commits:
            writes = batch_writes(storage, commit, (cf,))[cf]
            maker = RowMaker(self.target, self.history, list(self.key_types), num_partitions,
                             grouped)
            try:
                rows = list(maker.change_rows(commit.batch_id, sorted(writes.items()),
                                              whole_lists=self.whole_lists))
            except StateDecodingError as exc:
                raise ChangeFeedError(
                    f"change feed of {self.target.name!r}: batch {commit.batch_id} holds "
                    f"values this feed cannot show in its schema (the producer's state schema "
                    f"changed after the feed's query started?); start the consuming query "
                    f"again to read them in the producer's new schema: {exc}") from exc
            yield from rows
