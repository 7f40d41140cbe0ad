"""One batch's state metrics as a flat {name: number} dict, from its tasks' statistics.

The same dict is logged per batch, recorded in the commit entry (`extra["metrics"]`), shown to
Spark as observed metrics and plotted by the report page, so every consumer sees one set of
names (docs/metrics.md lists them). Plain Python: the report tool reads it without pyspark.

Task statistics are folded generically: every numeric top-level entry of a task's stats is
summed over the tasks, except durations (names ending in `_seconds`), whose maximum is kept
(the slowest task bounds the batch), and instants in epoch milliseconds: `next_*_ms` keep the
earliest (the next timer of any partition), `max_*_ms` the latest. A counter a task starts
reporting, such as `timers_fired`, appears here with no change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.changelog.metrics import LATENCY_BUCKETS

# task stats entries that identify a task rather than measure it
NOT_MEASURES = frozenset({"partition", "attempt", "materialized_version"})
# per-task values of the store's metrics that describe this batch (the rest are cumulative
# counters of a store instance's life, meaningless when summed per batch)
STORE_MEASURES = {
    "rows_updated": "rows_updated",
    "rows_removed": "rows_removed",
    "estimated_keys": "state_rows_estimate",
    "memory_bytes": "memory_bytes",
    "disk_bytes": "disk_bytes",
    "snapshot_restore_seconds": "snapshot_restore_seconds",
    "replay_seconds": "replay_seconds",
    "commit_flush_seconds": "commit_flush_seconds",
    "commit_upload_wait_seconds": "commit_upload_wait_seconds",
}
UPLOAD_COUNTERS = ("requests", "request_failures", "uploads", "upload_failures",
                   "bytes_uploaded", "retries", "hedges_started", "hedges_won")
LATENCY_LABELS = (*(f"{bound:g}" for bound in LATENCY_BUCKETS), "+Inf")


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def fold(into: dict[str, float], name: str, value: float) -> None:
    """Add `value` to `into[name]`; keep the larger duration, the earliest `next_*_ms` and
    the latest `max_*_ms`."""
    if name.endswith("_seconds"):
        into[name] = max(into.get(name, 0.0), float(value))
    elif name.endswith("_ms") and name.startswith("next_"):
        into[name] = min(into.get(name, value), value)
    elif name.endswith("_ms") and name.startswith("max_"):
        into[name] = max(into.get(name, value), value)
    else:
        into[name] = into.get(name, 0) + value


def task_measures(stats: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Top-level numbers and the per-batch store numbers of every task, folded."""
    folded: dict[str, float] = {}
    for item in stats:
        for name, value in item.items():
            if name not in NOT_MEASURES and is_number(value):
                fold(folded, name, value)
        store = item.get("store") or {}
        for name, target in STORE_MEASURES.items():
            if is_number(store.get(name)):
                fold(folded, target, store[name])
        kind = str(store.get("load_kind", "unknown"))
        fold(folded, f"loads_{kind}", 1)
    return folded


def upload_measures(stats: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The tasks' upload deltas summed, with the extra-request ratio and latency quantiles."""
    totals = dict.fromkeys(UPLOAD_COUNTERS, 0)
    blocked = 0.0
    buckets = dict.fromkeys(LATENCY_LABELS, 0)
    for item in stats:
        upload = item.get("upload") or {}
        for name in UPLOAD_COUNTERS:
            totals[name] += int(upload.get(name, 0))
        blocked += float(upload.get("blocked_seconds", 0.0))
        for label, count in (upload.get("latency_buckets") or {}).items():
            if label in buckets:
                buckets[label] += int(count)
    needed = totals["uploads"] + totals["upload_failures"]
    extra = max(0, totals["requests"] - needed)
    return {
        "upload_requests": totals["requests"],
        "upload_request_failures": totals["request_failures"],
        "uploads": totals["uploads"],
        "upload_failures": totals["upload_failures"],
        "upload_bytes": totals["bytes_uploaded"],
        "upload_retries": totals["retries"],
        "upload_hedges_started": totals["hedges_started"],
        "upload_hedges_won": totals["hedges_won"],
        "upload_extra_request_ratio": extra / needed if needed else 0.0,
        "upload_latency_p50_seconds": bucket_quantile(buckets, 0.50),
        "upload_latency_p99_seconds": bucket_quantile(buckets, 0.99),
        "upload_blocked_seconds": blocked,
    }


def bucket_quantile(buckets: Mapping[str, int], q: float) -> float:
    """The upper bound of the latency bucket holding quantile `q` (the last finite bound for
    the unbounded bucket); 0.0 without observations. Exact to the bucket, which is what can
    be added up across processes."""
    total = sum(buckets.get(label, 0) for label in LATENCY_LABELS)
    if total == 0:
        return 0.0
    rank = q * total
    seen = 0
    for label, bound in zip(LATENCY_LABELS, (*LATENCY_BUCKETS, LATENCY_BUCKETS[-1]),
                            strict=True):
        seen += buckets.get(label, 0)
        if seen >= rank:
            return float(bound)
    return float(LATENCY_BUCKETS[-1])


def snapshot_measures(infos: Mapping[int, StoreCommit],
                      previous: Mapping[int, StoreCommit]) -> dict[str, float]:
    """Snapshots as the checkpoints name them: started at this commit (still uploading),
    newly adopted (a newer snapshot than the base names) and the bytes those uploaded."""
    started = adopted = uploaded = 0
    for partition, info in infos.items():
        if info.pending_snapshot is not None and info.pending_snapshot[0] == info.version:
            started += 1
        before = previous.get(partition)
        old = before.materialized if before is not None else None
        new = info.materialized
        if new is not None and (old is None or (old.version, old.unique_id)
                                != (new.version, new.unique_id)):
            adopted += 1
            uploaded += new.incremental_bytes
    return {"snapshots_started": started, "snapshots_adopted": adopted,
            "snapshot_bytes": uploaded}


def batch_metrics(stats: Mapping[int, Mapping[str, Any]], infos: Mapping[int, StoreCommit],
                  previous: Mapping[int, StoreCommit]) -> dict[str, float]:
    """Every per-batch metric of one stateful operator, by name."""
    tasks = list(stats.values())
    return {**task_measures(tasks), **upload_measures(tasks),
            **snapshot_measures(infos, previous), "partitions": len(infos)}


@dataclass(frozen=True)
class UploadProgress:
    """What the changelog's uploads did during one batch, summed over its tasks."""

    requests: int = 0
    retries: int = 0
    hedges_started: int = 0
    hedges_won: int = 0
    uploads: int = 0
    upload_failures: int = 0
    extra_request_ratio: float = 0.0  # requests beyond one per upload, per upload
    latency_p50_seconds: float = 0.0
    latency_p99_seconds: float = 0.0
    bytes: int = 0
    blocked_seconds: float = 0.0  # writers held back by the in-flight byte limit

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, float]) -> UploadProgress:
        def count(name: str) -> int:
            return int(metrics.get(name, 0))

        return cls(
            requests=count("upload_requests"), retries=count("upload_retries"),
            hedges_started=count("upload_hedges_started"),
            hedges_won=count("upload_hedges_won"), uploads=count("uploads"),
            upload_failures=count("upload_failures"),
            extra_request_ratio=float(metrics.get("upload_extra_request_ratio", 0.0)),
            latency_p50_seconds=float(metrics.get("upload_latency_p50_seconds", 0.0)),
            latency_p99_seconds=float(metrics.get("upload_latency_p99_seconds", 0.0)),
            bytes=count("upload_bytes"),
            blocked_seconds=float(metrics.get("upload_blocked_seconds", 0.0)))
