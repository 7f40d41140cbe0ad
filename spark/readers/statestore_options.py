"""The options of Spark's `statestore` source, parsed and checked as Spark 4.x checks them.

Names are case-insensitive (Spark reads them through a case-insensitive map; PySpark hands a
Python data source its options with lower-cased keys), unknown options are ignored, values
are parsed as Spark parses them (`toInt`, `toLong`, `toBoolean`: "true"/"false" in any case,
`storeName` and `stateVarName` trimmed), and the checks run in Spark's order, so the first
problem reported is Spark's first. The checks that need the checkpoint (which batches are
committed, which state variables the operator declares) take a `Committed` view of it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from pyspark_dstl.spark.readers import state_data_errors as errors

PATH = "path"
BATCH_ID = "batchId"
OPERATOR_ID = "operatorId"
STORE_NAME = "storeName"
JOIN_SIDE = "joinSide"
STATE_VAR_NAME = "stateVarName"
READ_REGISTERED_TIMERS = "readRegisteredTimers"
FLATTEN_COLLECTION_TYPES = "flattenCollectionTypes"
READ_CHANGE_FEED = "readChangeFeed"
CHANGE_START_BATCH_ID = "changeStartBatchId"
CHANGE_END_BATCH_ID = "changeEndBatchId"
SNAPSHOT_START_BATCH_ID = "snapshotStartBatchId"
SNAPSHOT_PARTITION_ID = "snapshotPartitionId"
OPTIONS = (PATH, BATCH_ID, OPERATOR_ID, STORE_NAME, JOIN_SIDE, STATE_VAR_NAME,
           READ_REGISTERED_TIMERS, FLATTEN_COLLECTION_TYPES, READ_CHANGE_FEED,
           CHANGE_START_BATCH_ID, CHANGE_END_BATCH_ID, SNAPSHOT_START_BATCH_ID,
           SNAPSHOT_PARTITION_ID)
DEFAULT_STORE_NAME = "default"
JOIN_SIDES = ("left", "right", "none")
INTEGER = re.compile(r"^[+-]?[0-9]+$")
INT_RANGE = (-(2**31), 2**31 - 1)
LONG_RANGE = (-(2**63), 2**63 - 1)


class Committed(Protocol):
    """What the option checks need to know of a checkpoint location."""

    location: str  # as Spark shows it in messages: file:///..., s3://...

    def newest_batch(self) -> int | None:
        """The newest committed batch; None when nothing was committed."""

    def missing_batch(self, batch_id: int) -> str | None:
        """None when `batch_id` has a commit entry; else why not (newer than the newest,
        or cleaned up: the retention setting named)."""


@dataclass(frozen=True)
class StateSourceOptions:
    """Spark's options after parsing: `batch_id` is the batch read (for a change feed, its
    end); `change_range` (start, end) only with readChangeFeed; `snapshot` (start batch,
    partition) only with both snapshot options."""

    path: str
    batch_id: int
    operator_id: int
    store_name: str
    join_side: str
    state_var_name: str | None
    read_registered_timers: bool
    flatten_collection_types: bool
    change_range: tuple[int, int] | None
    snapshot: tuple[int, int] | None

    @property
    def read_change_feed(self) -> bool:
        return self.change_range is not None

    def describe(self, location: str) -> str:
        """Spark's rendering of the options in its messages."""
        text = (f"StateSourceOptions(checkpointLocation={location}, batchId={self.batch_id}, "
                f"operatorId={self.operator_id}, storeName={self.store_name}, "
                f"joinSide={self.join_side}, stateVarName={self.state_var_name or 'None'}, "
                f"flattenCollectionTypes={str(self.flatten_collection_types).lower()}")
        if self.snapshot is not None:
            text += (f", snapshotStartBatchId={self.snapshot[0]}, "
                     f"snapshotPartitionId={self.snapshot[1]}")
        if self.change_range is not None:
            text += (f", changeStartBatchId={self.change_range[0]}, "
                     f"changeEndBatchId={self.change_range[1]}")
        return text + ")"


def lowered(options: Mapping[str, object]) -> dict[str, str]:
    """Options by lower-cased name, as Spark's case-insensitive map finds them (the value of
    the name given last wins, as in Spark)."""
    return {str(key).lower(): str(value) for key, value in options.items() if value is not None}


def _number(options: Mapping[str, str], name: str, bounds: tuple[int, int]) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    if not INTEGER.match(raw) or not bounds[0] <= int(raw) <= bounds[1]:
        kind = "an integer" if bounds == INT_RANGE else "a long integer"
        raise errors.invalid(name, f"For input string: \"{raw}\" ({kind} is expected)")
    return int(raw)


def _boolean(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise errors.invalid(name, "Boolean value is expected")
    return raw.lower() == "true"


def parse_options(given: Mapping[str, object], checkpoint: Committed | None = None
                  ) -> StateSourceOptions:
    """Spark's options from `given` (any case), checked in Spark's order. `checkpoint` answers
    the checks that need the committed batches; without it they are skipped (the reader
    repeats them once the location is open)."""
    options = lowered(given)
    path = options.get(PATH.lower())
    if path is None:
        raise errors.required(PATH)
    operator_id = _number(options, OPERATOR_ID, INT_RANGE)
    operator_id = 0 if operator_id is None else operator_id
    if operator_id < 0:
        raise errors.negative(OPERATOR_ID)
    store_name = options.get(STORE_NAME.lower(), DEFAULT_STORE_NAME).strip()
    if not store_name:
        raise errors.empty(STORE_NAME)
    state_var = options.get(STATE_VAR_NAME.lower())
    state_var = None if state_var is None else state_var.strip()
    timers = _boolean(options, READ_REGISTERED_TIMERS, False)
    if timers and state_var is not None:
        raise errors.conflict([READ_REGISTERED_TIMERS, STATE_VAR_NAME])
    flatten = _boolean(options, FLATTEN_COLLECTION_TYPES, True)
    join_side = options.get(JOIN_SIDE.lower(), "none")
    if join_side not in JOIN_SIDES:
        raise errors.invalid(JOIN_SIDE, f"Valid values are {','.join(JOIN_SIDES)}")
    if join_side != "none" and store_name != DEFAULT_STORE_NAME:
        raise errors.conflict([JOIN_SIDE, STORE_NAME])
    batch_id = _number(options, BATCH_ID, LONG_RANGE)
    snapshot_start = _number(options, SNAPSHOT_START_BATCH_ID, LONG_RANGE)
    snapshot_partition = _number(options, SNAPSHOT_PARTITION_ID, INT_RANGE)
    change_feed = _boolean(options, READ_CHANGE_FEED, False)
    change_start = _number(options, CHANGE_START_BATCH_ID, LONG_RANGE)
    change_end = _number(options, CHANGE_END_BATCH_ID, LONG_RANGE)
    change_range: tuple[int, int] | None = None
    snapshot: tuple[int, int] | None = None
    if change_feed:
        for name, value in ((JOIN_SIDE, None if join_side == "none" else join_side),
                            (BATCH_ID, batch_id), (SNAPSHOT_START_BATCH_ID, snapshot_start),
                            (SNAPSHOT_PARTITION_ID, snapshot_partition)):
            if value is not None:
                raise errors.conflict([name, READ_CHANGE_FEED])
        if change_start is None:
            raise errors.required(CHANGE_START_BATCH_ID)
        if change_end is None:
            change_end = _newest(checkpoint)
        if change_start < 0:
            raise errors.negative(CHANGE_START_BATCH_ID)
        if change_end is not None and change_end < change_start:
            raise errors.invalid(
                CHANGE_END_BATCH_ID,
                f"{CHANGE_END_BATCH_ID} cannot be smaller than {CHANGE_START_BATCH_ID}. Please "
                f"check the input to {CHANGE_END_BATCH_ID}, or if you are using its default "
                f"value, make sure that {CHANGE_START_BATCH_ID} is less than {change_end}.")
        _require_committed(checkpoint, change_start)
        if change_end is not None:
            _require_committed(checkpoint, change_end)
        batch_id = change_end
        change_range = (change_start, -1 if change_end is None else change_end)
    else:
        for name, value in ((CHANGE_START_BATCH_ID, change_start),
                            (CHANGE_END_BATCH_ID, change_end)):
            if value is not None:
                raise errors.invalid(name, f"Only specify this option when "
                                           f"{READ_CHANGE_FEED} is set to true.")
        if batch_id is None:
            batch_id = _newest(checkpoint)
        if batch_id is not None and batch_id < 0:
            raise errors.negative(BATCH_ID)
        if batch_id is not None:
            _require_committed(checkpoint, batch_id)
        if snapshot_start is not None and snapshot_start < 0:
            raise errors.negative(SNAPSHOT_START_BATCH_ID)
        if snapshot_start is not None and batch_id is not None and snapshot_start > batch_id:
            raise errors.invalid(SNAPSHOT_START_BATCH_ID,
                                 f"value should be less than or equal to {batch_id}")
        if snapshot_partition is not None and snapshot_partition < 0:
            raise errors.negative(SNAPSHOT_PARTITION_ID)
        if snapshot_partition is not None and snapshot_start is None:
            raise errors.required(SNAPSHOT_START_BATCH_ID)
        if snapshot_partition is None and snapshot_start is not None:
            raise errors.required(SNAPSHOT_PARTITION_ID)
        if snapshot_start is not None and snapshot_partition is not None:
            snapshot = (snapshot_start, snapshot_partition)
    return StateSourceOptions(path, -1 if batch_id is None else batch_id, operator_id,
                              store_name, join_side, state_var, timers, flatten, change_range,
                              snapshot)


def _newest(checkpoint: Committed | None) -> int | None:
    if checkpoint is None:
        return None
    newest = checkpoint.newest_batch()
    if newest is None:
        raise errors.no_committed_batch(checkpoint.location)
    return newest


def _require_committed(checkpoint: Committed | None, batch_id: int) -> None:
    """Spark 4.x refuses a batch without a commit (later than the newest, or cleaned up);
    a second line says which."""
    if checkpoint is None:
        return
    why = checkpoint.missing_batch(batch_id)
    if why is not None:
        raise errors.no_committed_batch(checkpoint.location, why)
