"""Rescaling a checkpoint of the Spark integration to another number of state partitions.

Two ways in, one mechanism per layout:
- a checkpoint in key groups (its commit entries record `layout`) is rescaled by moving ranges
  of key groups (backend/rescale/ranges.py): no key is decoded or hashed;
- a checkpoint of the hash layout, written before key groups existed, is migrated to key
  groups once, key by key (backend/rescale/key_by_key.py, each key decoded, hashed and given
  its group by keys/key_routing.py), at the next start or rescale, whatever the partition count; its
  commit entry records the migration.
Both ways in:
- online: a query started with another partition count (builder `partitions=` or
  `spark.sql.shuffle.partitions`) rescales the state its first batch builds on; the new stores
  become the checkpoint with that batch's commit entry. RocksDB is never opened in the driver,
  so the work runs in a child process (`python -m` this module, JSON in and out).
- offline: `python -m pyspark_dstl rescale <checkpoint> --partitions N` holds the checkpoint's
  lease, rescales the newest committed batch and writes it again as that batch's next
  generation (one create-only commit log entry); the query then starts on the new layout.

Either way the switch is one commit log entry: a kill before it leaves the old layout, after
it the new one. This module imports no pyspark.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark_dstl.backend.backend_settings import BackendSettings, FencingSettings
from pyspark_dstl.backend.fencing.lease import acquire
from pyspark_dstl.backend.lineage.commit_entry import CommitEntry, OperatorCommit
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.rescale.key_by_key import RescaleError, rescale_stores
from pyspark_dstl.backend.rescale.key_groups import (
    KEY_GROUPS,
    check_partitions,
    key_groups_in,
    layout_extra,
)
from pyspark_dstl.backend.rescale.layout import partitioning
from pyspark_dstl.backend.rescale.ranges import rescale_ranges
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.spark.keys.key_routing import HashLayoutMigration, key_offset

KEY_TYPES = "key_types"  # commit entry extra: the key columns' Spark types, in order
RESCALE = "rescale"  # commit entry extra: what the rescale that made this layout did
def needs_rescale(entry: CommitEntry, operator: str, partitions: int) -> bool:
    """Whether `entry`'s state of `operator` must move before a batch on `partitions` runs:
    another partition count, or the hash layout (migrated once)."""
    if operator not in entry.operators:
        return False
    return (entry.operators[operator].num_partitions != partitions
            or key_groups_in(entry.extra) is None)


@dataclass(frozen=True)
class Rescaled:
    """New stores for an operator, and the record the commit entry keeps of their making."""

    infos: dict[int, StoreCommit]
    record: dict[str, Any]


def recorded_key_types(entry: CommitEntry, location: str) -> tuple[str, ...]:
    """The key columns' Spark types; only a migration from the hash layout needs them (a
    range rescale decodes no key), so an entry of key groups may lack them."""
    types = entry.extra.get(KEY_TYPES)
    if not types:
        if key_groups_in(entry.extra) is not None:
            return ()
        raise RescaleError(
            f"checkpoint {location!r}: batch {entry.batch_id}'s commit entry does not record the "
            f"key columns' Spark types (written before rescaling existed), which migrating it "
            f"to key groups needs: pass --key-types (e.g. --key-types bigint,string, in key "
            f"column order), or start the query with its old partition count once and "
            f"rescale after")
    return tuple(str(t) for t in types)


def operators_of(entry: CommitEntry, location: str, operator: str | None) -> list[str]:
    """The operators to rescale: the one named, else every operator of the batch (the steps
    of a chain share one partition count)."""
    if operator is not None:
        if operator not in entry.operators:
            raise RescaleError(f"checkpoint {location!r}: batch {entry.batch_id} has no operator "
                               f"{operator!r} (has {sorted(entry.operators)})")
        return [operator]
    return list(entry.operators)


def rescale(settings: BackendSettings, location: str, entry: CommitEntry, operator: str,
            partitions: int, key_types: Sequence[str], mode: str) -> Rescaled:
    """The stores of `entry`'s operator, redistributed over `partitions` in key groups (in
    this process): ranges moved, or, from the hash layout, every key migrated."""
    commit = entry.operators[operator]
    groups = key_groups_in(entry.extra)
    try:
        check_partitions(partitions, groups or KEY_GROUPS)
    except ValueError as exc:
        raise RescaleError(f"checkpoint {location!r}, operator {operator!r}: {exc}: choose at most "
                           f"{groups or KEY_GROUPS} partitions") from exc
    if groups is None:
        place = HashLayoutMigration(key_types, partitions, KEY_GROUPS)
        infos, stats = rescale_stores(settings, location, operator, commit.stores, partitions,
                                      place)
        method, groups = "keys: migrated from the hash layout to key groups", KEY_GROUPS
    else:
        infos, stats = rescale_ranges(settings, location, operator, commit.stores, partitions,
                                      groups, key_offset)
        method = "ranges of key groups"
    record = {"batch_id": entry.batch_id, "from_partitions": commit.num_partitions,
              "to_partitions": partitions, "partitioning": partitioning(layout_extra(groups)),
              "key_groups": groups,
              "method": method, "migration": method.startswith("keys"), "mode": mode,
              **stats.to_dict()}
    return Rescaled(infos, record)


def rescaled_entry(entry: CommitEntry, operator: str, rescaled: Rescaled,
                   key_types: Sequence[str]) -> CommitEntry:
    """`entry` with the operator's new stores, recording the rescale (a new generation)."""
    operators = dict(entry.operators)
    operators[operator] = OperatorCommit(rescaled.record["to_partitions"], rescaled.infos)
    extra = {**entry.extra, RESCALE: rescaled.record,
             **layout_extra(int(rescaled.record["key_groups"]))}
    if key_types:
        extra[KEY_TYPES] = list(key_types)
    return dataclasses.replace(entry, operators=operators, extra=extra, writer=None)


def rescale_offline(storage: ChangelogService, settings: BackendSettings,
                    fencing: FencingSettings, partitions: int, *, operator: str | None = None,
                    key_types: Sequence[str] | None = None) -> dict[str, Any]:
    """Rescale the newest committed batch of a stopped query; returns the rescale record
    (`changed` False when the checkpoint already has that many partitions)."""
    location = storage.url
    lease = acquire(storage, fencing, purpose="rescale")
    try:
        log = CommitLog(storage)
        latest = log.latest()
        if latest is None:
            raise RescaleError(f"checkpoint {location!r} has no committed batch: there is no state "
                               f"to rescale (start the query with the partition count you "
                               f"want)")
        batch_id, entry = latest
        names = operators_of(entry, location, operator)
        moving = [name for name in names if needs_rescale(entry, name, partitions)]
        if not moving:
            return {"changed": False, "batch_id": batch_id, "partitions": partitions,
                    "operator": ", ".join(names), "key_groups": key_groups_in(entry.extra)}
        first = names[0]
        types = tuple(key_types) if key_types else recorded_key_types(entry, location)
        record: dict[str, Any] = {}
        for name in moving:  # every operator's new stores, then one entry naming them all
            own = types if name == first else ()
            rescaled = rescale(settings, location, entry, name, partitions, own, "offline")
            entry = rescaled_entry(entry, name, rescaled, own)
            record = record or rescaled.record
        path = log.write(batch_id, entry, lease=lease, rerun=True)
        return {"changed": True, "operator": ", ".join(moving), "commit_entry": path, **record}
    finally:
        lease.release("rescale finished")


def rescale_in_child(settings: Mapping[str, str], location: str, entry: CommitEntry,
                     operator: str, partitions: int, key_types: Sequence[str]) -> Rescaled:
    """`rescale` in a child process: the driver never opens RocksDB itself."""
    request = {"settings": dict(settings), "location": location, "entry": entry.to_dict(),
               "operator": operator, "partitions": partitions, "key_types": list(key_types)}
    done = subprocess.run([sys.executable, "-m", __name__], input=json.dumps(request),
                          capture_output=True, text=True, env=os.environ.copy(), check=False)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise RescaleError(f"checkpoint {location!r}: rescaling operator {operator!r} to "
                           f"{partitions} partition(s) failed: {tail[0]} (the checkpoint "
                           f"keeps its old layout; a restart tries again)")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    infos = {int(p): StoreCommit.from_dict(info) for p, info in answer["infos"].items()}
    return Rescaled(infos, answer["record"])


def _child_main() -> None:
    request = json.loads(sys.stdin.read())
    settings = BackendSettings.from_mapping(request["settings"])
    entry = CommitEntry.from_dict(request["entry"])
    done = rescale(settings, request["location"], entry, request["operator"],
                   int(request["partitions"]), request["key_types"], "online")
    print(json.dumps({"infos": {str(p): info.to_dict() for p, info in done.infos.items()},
                      "record": done.record}))


if __name__ == "__main__":
    _child_main()
