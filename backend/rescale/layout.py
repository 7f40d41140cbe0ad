"""The layout of every committed batch: each operator's partition count and how keys map to
partitions, and where a rescale changed it. `inspect` and `verify` print it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark_dstl.backend.backend_errors import CommitLogError
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.rescale.key_groups import key_groups_in

HASH = "pmod(hash(key columns), partitions)"
HASH_LAYOUT = (f"{HASH} (the hash layout, written before key groups: migrated to key groups at "
               f"the next start or rescale)")


def partitioning(extra: Mapping[str, Any]) -> str:
    """How a batch's keys map to partitions, in words (an entry of the Spark integration
    without key groups is of the hash layout; other writers choose their own partitioning)."""
    key_groups = key_groups_in(extra)
    if key_groups is None:
        return HASH_LAYOUT if "key_columns" in extra else HASH
    return (f"{key_groups} key groups (pmod(hash(key columns), {key_groups})), each partition "
            f"owning a contiguous range")


def batch_layouts(log: CommitLog, problems: list[str]) -> list[dict[str, Any]]:
    """One record per committed batch (its newest generation), oldest first."""
    layouts: list[dict[str, Any]] = []
    try:
        batch_ids = log.batch_ids()  # reads entries to tell them from fences
    except CommitLogError as exc:
        problems.append(str(exc))
        return layouts
    for batch_id in batch_ids:
        try:
            entry = log.read(batch_id)
        except CommitLogError as exc:
            problems.append(str(exc))
            continue
        rescale = entry.extra.get("rescale")
        layouts.append({
            "batch_id": batch_id,
            "operators": {name: commit.num_partitions
                          for name, commit in sorted(entry.operators.items())},
            "key_groups": key_groups_in(entry.extra),
            "partitioning": partitioning(entry.extra),
            "key_types": entry.extra.get("key_types"),
            "rescale": None if not isinstance(rescale, dict) else {
                key: rescale.get(key) for key in ("from_partitions", "to_partitions", "mode",
                                                  "batch_id", "keys", "seconds", "method",
                                                  "migration")},
        })
    return layouts


def format_layouts(layouts: list[dict[str, Any]]) -> list[str]:
    """Runs of batches with one layout, one line each; a rescale starts a new line."""
    lines: list[str] = []
    start = 0
    for index in range(1, len(layouts) + 1):
        if index < len(layouts) and layouts[index]["operators"] == layouts[start]["operators"] \
                and layouts[index]["key_groups"] == layouts[start]["key_groups"] \
                and layouts[index]["rescale"] is None:
            continue
        first, last = layouts[start], layouts[index - 1]
        span = (f"batch {first['batch_id']}" if first is last
                else f"batches {first['batch_id']}-{last['batch_id']}")
        parts = ", ".join(f"{name} {count} partition(s)"
                          for name, count in first["operators"].items())
        line = f"layout {span}: {parts} by {first['partitioning']}"
        rescale = first["rescale"]
        if rescale is not None:
            done = ("migrated to key groups" if rescale.get("migration")
                    else "rescaled by moving ranges" if rescale.get("method") else "rescaled")
            line += (f" ({done} {rescale['mode']} from {rescale['from_partitions']} "
                     f"partition(s) at batch {rescale['batch_id']})")
        lines.append(line)
        start = index
    return lines
