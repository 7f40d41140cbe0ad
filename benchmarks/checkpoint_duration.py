"""Benchmark 1: checkpoint duration vs state size, three ways to make RocksDB state durable.

(a) this backend: a commit persists the changelog since the last materialization (snapshots
    run in the background every 10 commits, as configured by default) and returns; the batch's
    RocksDB write runs after it on a background thread, and the next transaction waits for
    it (that wait is in "write+ckpt" and in its own column);
(a0) the same with the RocksDB write inside the commit (stateStore.backgroundEngineWrite=false),
    as before that setting existed;
(b) an incremental RocksDB snapshot per checkpoint: flush, checkpoint, upload the SST files not
    uploaded yet plus the metadata files and a manifest (what Spark's RocksDB provider does
    without changelog checkpointing; the materializer does it here, with parallel uploads);
(c) a full snapshot per checkpoint: every file uploaded every time.

    python -m benchmarks.checkpoint_duration [--quick] [--storage file,s3] [--sizes ...]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness import Report, parse_args, plan_of, profiled, ratio, scratch, summarize
from benchmarks.latency import LatencyModel
from benchmarks.plots import checkpoint_plots
from benchmarks.s3 import S3Harness
from benchmarks.workload import (
    OPERATOR,
    Workload,
    backend_options,
    file_url,
    load_store,
    open_raw_db,
    rocksdb_settings,
    write_raw,
)
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.materializer.materialized_handle import SnapshotRequest
from pyspark_dstl.materializer.materializer import Materializer
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings

NAME = "checkpoint_duration"
MODES = ("changelog", "changelog_in_commit", "incremental", "full")
LABELS = {"changelog": "(a) changelog", "changelog_in_commit": "(a0) changelog, write in commit",
          "incremental": "(b) incremental snapshot", "full": "(c) full snapshot"}
FULL: dict[str, Any] = {"sizes": [100_000, 1_000_000, 5_000_000], "checkpoints": 50,
                        "full_checkpoints": 10}
QUICK: dict[str, Any] = {"sizes": [2_000, 20_000], "checkpoints": 6, "full_checkpoints": 3}
S3_LATENCY = LatencyModel(first_byte_median=0.020, first_byte_sigma=0.35, bandwidth=200e6)
STORE_DIR = f"state/{OPERATOR}/0"


@dataclass
class Target:
    """Where checkpoints go: a file:// directory or a bucket behind the proxy."""

    kind: str
    url: str
    options: ChangelogSettings


@dataclass
class ModeResult:
    mode: str
    durations: list[float] = field(default_factory=list)
    write_seconds: list[float] = field(default_factory=list)
    wait_seconds: list[float] = field(default_factory=list)  # of write_seconds: catch-up
    sync_bytes: list[int] = field(default_factory=list)
    total_bytes: int = 0
    setup_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


# --- (a) this backend --------------------------------------------------------------------------


def run_changelog(target: Target, workload: Workload, checkpoints: int,
                  work: Path, background: bool = True) -> ModeResult:
    """(a), or (a0) when `background` is False."""
    result = ModeResult("changelog" if background else "changelog_in_commit")
    options = backend_options(work / "local", target.options,
                              background_engine_write=background)
    with StateBackend(options) as backend:
        provider = backend.provider(target.url, OPERATOR, 0)
        started = time.perf_counter()
        store = provider.get_store(0)
        load_store(store, workload)
        info = store.commit(materialize=True)  # start from a snapshot, as a running job would
        result.setup_seconds = time.perf_counter() - started
        context = backend.context(target.url)
        before_all = context.storage.metrics_snapshot()["bytes_uploaded"]
        before_snapshots = context.materializer.metrics_snapshot()["bytes_uploaded"]
        changes = workload.step()
        for index in range(checkpoints):
            began = time.perf_counter()
            # the previous commit's engine write may still run: the next transaction waits
            store = provider.get_store(info.version, info)
            waited = time.perf_counter() - began
            for user_key, value in changes:
                store.put(user_key, value)
            result.write_seconds.append(time.perf_counter() - began)
            result.wait_seconds.append(waited)
            if index + 1 < checkpoints:  # made here, so nothing overlaps the engine write
                changes = workload.step()
            began = time.perf_counter()
            new_info = store.commit()
            result.durations.append(time.perf_counter() - began)
            result.sync_bytes.append(_new_changelog_bytes(info, new_info))
            info = new_info
        store_metrics = store.metrics()
        provider.close()
        backend.context(target.url).materializer.close()  # let background snapshots finish
        result.total_bytes = int(context.storage.metrics_snapshot()["bytes_uploaded"]
                                 - before_all)
        snapshots = context.materializer.metrics_snapshot()
        result.extra = {
            "background_snapshot_bytes": int(snapshots["bytes_uploaded"] - before_snapshots),
            "snapshots_started": store_metrics.get("snapshots_started"),
            "snapshots_adopted": store_metrics.get("snapshots_adopted"),
            "engine_background_write_seconds": store_metrics.get(
                "engine_background_write_seconds"),
            "snapshot_checkpoint_wait_seconds": store_metrics.get(
                "snapshot_checkpoint_wait_seconds"),
        }
    return result


def _new_changelog_bytes(old: StoreCommit, new: StoreCommit) -> int:
    """Bytes of changelog this commit made durable (segments the previous one did not have)."""
    known = set(old.changelog.paths)
    return sum(s.length for s in new.changelog.segments if s.path not in known)


# --- (b) and (c) snapshots per checkpoint -----------------------------------------------------


def run_snapshots(mode: str, target: Target, workload: Workload, checkpoints: int,
                  work: Path) -> ModeResult:
    """(b) when mode == "incremental", (c) when mode == "full"."""
    result = ModeResult(mode)
    storage = ChangelogService(target.url, target.options)
    materializer = Materializer(storage, MaterializerSettings(interval=None,
                                                             every_n_commits=None),
                                str(work / "materializer"))
    store_id = f"{OPERATOR}/0"
    materializer.register(store_id, STORE_DIR)
    db = open_raw_db(work / "db", rocksdb_settings())
    try:
        started = time.perf_counter()
        for chunk in workload.initial_chunks():
            write_raw(db, chunk)
        snapshot(materializer, db, store_id, 0)
        result.setup_seconds = time.perf_counter() - started
        first = storage.metrics_snapshot()["bytes_uploaded"]
        for version in range(1, checkpoints + 1):
            changes = workload.step()
            began = time.perf_counter()
            write_raw(db, changes)
            result.write_seconds.append(time.perf_counter() - began)
            previous = storage.list(STORE_DIR + "/") if mode == "full" else []
            if mode == "full":  # forget what was uploaded: every file goes again
                materializer.unregister(store_id)
                materializer.register(store_id, STORE_DIR)
            before = storage.metrics_snapshot()["bytes_uploaded"]
            began = time.perf_counter()
            snapshot(materializer, db, store_id, version)
            result.durations.append(time.perf_counter() - began)
            result.sync_bytes.append(int(storage.metrics_snapshot()["bytes_uploaded"] - before))
            if previous:  # keep one full snapshot, as retention would (not timed)
                storage.delete_many([info.path for info in previous])
        result.total_bytes = int(storage.metrics_snapshot()["bytes_uploaded"] - first)
        result.extra = {"live_sst_bytes": sum(int(f["size"]) for f in db.live_files())}
    finally:
        db.close()
        materializer.close()
        storage.close()
    return result


def snapshot(materializer: Materializer, db: Any, store_id: str, version: int) -> None:
    request = SnapshotRequest(store_id, version, f"v{version}", 0)
    materializer.snapshot(db, request).result()


# --- driver -----------------------------------------------------------------------------------


def run_size(report: Report, args: argparse.Namespace, storage_kind: str, size: int,
             s3: S3Harness | None, plan: dict[str, Any]) -> dict[str, ModeResult]:
    results: dict[str, ModeResult] = {}
    for mode in MODES:
        count = plan["checkpoints"]
        if mode == "full" and size >= 1_000_000:
            count = min(count, plan["full_checkpoints"])
        workload = Workload(size, 0.01, seed=args.seed)
        with scratch(args, f"ckpt-{mode}") as work:
            target = make_target(storage_kind, work, s3)
            if mode.startswith("changelog"):
                results[mode] = run_changelog(target, workload, count, work,
                                              background=mode == "changelog")
            else:
                results[mode] = run_snapshots(mode, target, workload, count, work)
        if s3 is not None:
            s3.reset_moto()
        stats = summarize(results[mode].durations)
        print(f"  {storage_kind} {size:>9,} keys {LABELS[mode]:<26} p50 {stats['p50']:.4f} s "
              f"p99 {stats['p99']:.4f} s ({len(results[mode].durations)} checkpoints, "
              f"setup {results[mode].setup_seconds:.1f} s)", flush=True)
    return results


def make_target(kind: str, work: Path, s3: S3Harness | None) -> Target:
    if kind == "file":
        return Target("file", file_url(work / "remote"), ChangelogSettings())
    assert s3 is not None
    return Target("s3", s3.new_root("ckpt"), s3.options())


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or NAME, argv, [
        (["--storage"], {"default": "file,s3", "help": "comma-separated: file, s3"}),
        (["--sizes"], {"default": None, "help": "comma-separated key counts"}),
        (["--checkpoints"], {"type": int, "default": None}),
    ])
    plan = plan_of(args, QUICK, FULL, ("checkpoints",))
    if args.sizes:
        plan["sizes"] = [int(float(s)) for s in args.sizes.split(",")]
    kinds = [k.strip() for k in args.storage.split(",") if k.strip()]
    config = {**plan, "storage": kinds, "changed_per_checkpoint": 0.01, "value_bytes": 100,
              "s3_latency_model": S3_LATENCY.to_dict(),
              "s3_latency_model_text": S3_LATENCY.describe(),
              "full_checkpoints_applies_from_keys": 1_000_000}
    report = Report(NAME, args, config)
    measured: dict[str, dict[int, dict[str, ModeResult]]] = {}
    with profiled(args):
        for kind in kinds:
            s3 = S3Harness(seed=args.seed).start() if kind == "s3" else None
            try:
                if s3 is not None:
                    s3.set_latency(S3_LATENCY)
                measured[kind] = {size: run_size(report, args, kind, size, s3, plan)
                                  for size in plan["sizes"]}
            finally:
                if s3 is not None:
                    s3.stop()
            tabulate(report, kind, measured[kind])
    summarize_goal(report, measured)
    report.put("samples", {kind: {str(size): {mode: {"durations": r.durations,
                                                     "write_seconds": r.write_seconds,
                                                     "wait_seconds": r.wait_seconds,
                                                     "sync_bytes": r.sync_bytes,
                                                     "total_bytes": r.total_bytes,
                                                     "setup_seconds": r.setup_seconds,
                                                     **r.extra}
                                              for mode, r in modes.items()}
                                  for size, modes in sizes.items()}
                           for kind, sizes in measured.items()})
    checkpoint_plots(report, measured_series(measured), LABELS)
    report.save()


def tabulate(report: Report, kind: str, by_size: dict[int, dict[str, ModeResult]]) -> None:
    rows = []
    for size, modes in by_size.items():
        base = summarize(modes["changelog"].durations)
        for mode, result in modes.items():
            stats = summarize(result.durations)
            both = summarize([w + d for w, d in zip(result.write_seconds, result.durations,
                                                    strict=True)])
            per_checkpoint = result.total_bytes / max(1, len(result.durations))
            waited = summarize(result.wait_seconds or [0.0])
            rows.append([f"{size:,}", LABELS[mode], stats["n"], stats["p50"] * 1000,
                         stats["p99"] * 1000, stats["max"] * 1000, both["p50"] * 1000,
                         both["p99"] * 1000, waited["p50"] * 1000,
                         summarize([float(b) for b in result.sync_bytes])["p50"] / 1e6,
                         per_checkpoint / 1e6, ratio(stats["p99"], base["p99"])])
    report.table(f"Checkpoint duration on {kind}:// (1% of keys changed per checkpoint)",
                 ["keys", "mode", "n", "p50 ms", "p99 ms", "max ms", "write+ckpt p50 ms",
                  "write+ckpt p99 ms", "catch-up wait p50 ms", "sync MB p50",
                  "all MB/ckpt", "p99 / (a) p99"], rows)


def summarize_goal(report: Report, measured: dict[str, dict[int, dict[str, ModeResult]]]
                   ) -> None:
    for kind, by_size in measured.items():
        size = max(by_size)
        a = summarize(by_size[size]["changelog"].durations)["p99"]
        b = summarize(by_size[size]["incremental"].durations)["p99"]
        speedup = ratio(b, a)
        report.goal(f"1. checkpoint p99 at {size:,} keys ({kind})",
                    "(a) >= 10x faster at p99 than (b)",
                    f"(a) {a * 1000:.0f} ms vs (b) {b * 1000:.0f} ms", speedup, speedup >= 10)


def measured_series(measured: dict[str, dict[int, dict[str, ModeResult]]]
                    ) -> dict[str, dict[int, dict[str, list[float]]]]:
    return {kind: {size: {mode: r.durations for mode, r in modes.items()}
                   for size, modes in by_size.items()}
            for kind, by_size in measured.items()}


if __name__ == "__main__":
    main()
