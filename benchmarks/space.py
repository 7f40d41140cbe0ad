"""Benchmark 5: checkpoint storage divided by live state size, batch after batch.

A store of `keys` keys (100-byte values) runs `batches` commits, each rewriting 1% of the keys.
Materialization runs on its defaults (every 10 commits, in the background); after every batch
the driver's commit log entry is written, and every `cleanup_every` batches the backend's
cleanup keeps the newest `minBatchesToRetain` batches and deletes the rest, as a job's
maintenance would. After every batch the bytes under the checkpoint root (file://) are summed
and divided by the live state's logical size (physical key + value of every live key).

Cleanup runs after every batch (it costs ~0.05-0.1 s): run every 10 batches it let up to 10
batches of superseded snapshots and changelog pile up, so the ratio measured the cleanup
cadence more than what the retention needs. The report also gives a lower bound per
retention, 1 + minBatchesToRetain x change rate: one copy of the state plus the changelog of
the retained batches, which no choice of snapshots can avoid (2x for minBatchesToRetain=100 at
1% per batch, above the 1.5x goal by construction). Only retentions whose lower bound is
within the goal get a goal row; the others are information in the table.

--rocksdb compares compaction settings.

    python -m benchmarks.space [--quick] [--keys 1000000] [--batches 200] [--retain 2,10,100]
                               [--cleanup-every 1]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.harness import (
    Report,
    dir_size,
    parse_args,
    plan_of,
    profiled,
    scratch,
    summarize,
)
from benchmarks.plots import line_plot
from benchmarks.workload import OPERATOR, Workload, backend_options, file_url, load_store
from pyspark_dstl.backend.backend_settings import (
    BACKEND_SETTING_KEYS,
    SETTINGS_PREFIX,
    BackendSettings,
)
from pyspark_dstl.backend.fencing.lease import acquire
from pyspark_dstl.backend.lineage.commit_log import CommitEntry, CommitLog, OperatorCommit
from pyspark_dstl.backend.ops.cleanup import cleanup_checkpoint
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings

NAME = "space"
FULL: dict[str, Any] = {"keys": 1_000_000, "batches": 200, "retain": [2, 10, 100],
                        "cleanup_every": 1}
QUICK: dict[str, Any] = {"keys": 5_000, "batches": 30, "retain": [5, 10],
                         "cleanup_every": 1}
CHANGE_RATE = 0.01
GOAL = 1.5


def run(args: argparse.Namespace, plan: dict[str, Any], retain: int) -> dict[str, Any]:
    workload = Workload(plan["keys"], CHANGE_RATE, seed=args.seed)
    series: list[float] = []
    bytes_series: list[int] = []
    deleted = 0
    cleanup_seconds: list[float] = []
    with scratch(args, f"space-{retain}") as work:
        remote = work / "remote"
        url = file_url(remote)
        materialization = (None if args.every_n_commits is None else
                           MaterializerSettings(every_n_commits=args.every_n_commits))
        options = backend_options(work / "local", ChangelogSettings(), materialization,
                                  min_batches_to_retain=retain,
                                  **rocksdb_changes(args))
        with StateBackend(options) as backend:
            storage = backend.context(url).storage
            lease = acquire(storage, options.fencing)  # this benchmark is the root's run
            commit_log = CommitLog(storage, lease=lease)
            provider = backend.provider(url, OPERATOR, 0)
            store = provider.get_store(0)
            load_store(store, workload)
            info = store.commit()
            for batch in range(plan["batches"]):
                if batch:
                    store = provider.get_store(info.version, info)
                    for user_key, value in workload.step():
                        store.put(user_key, value)
                    info = store.commit()
                entry = CommitEntry(batch, {OPERATOR: OperatorCommit(1, {0: info})})
                commit_log.write(batch, entry)
                if (batch + 1) % plan["cleanup_every"] == 0:
                    began = time.perf_counter()
                    report = cleanup_checkpoint(storage, retain, dry_run=False, lease=lease)
                    cleanup_seconds.append(time.perf_counter() - began)
                    deleted += len(report.files)
                    if report.problems:
                        raise RuntimeError(f"cleanup reported problems: {report.problems}")
                size = dir_size(remote)
                bytes_series.append(size)
                series.append(size / workload.live_bytes)
            lease.release()
    return {"retain": retain, "ratio": series, "bytes": bytes_series, "deleted_files": deleted,
            "cleanup_seconds": cleanup_seconds, "live_bytes": workload.live_bytes}


def rocksdb_changes(args: argparse.Namespace) -> dict[str, Any]:
    """BackendSettings fields from --rocksdb, e.g. "maxBytesForLevelBase=256MB,..." (keys of
    spark.dstl.rocksdb.*), to compare compaction settings side by side."""
    if not args.rocksdb:
        return {}
    conf = {f"{SETTINGS_PREFIX}rocksdb.{item.split('=', 1)[0].strip()}": item.split("=", 1)[1]
            for item in args.rocksdb.split(",") if item.strip()}
    parsed = BackendSettings.from_mapping(conf)
    return {name: getattr(parsed, name) for name, key in BACKEND_SETTING_KEYS.items()
            if f"{SETTINGS_PREFIX}{key}" in conf}


def lower_bound(retain: int) -> float:
    """One copy of the state plus the retained batches' changelog (at least their changes)."""
    return 1.0 + retain * CHANGE_RATE


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or NAME, argv, [
        (["--keys"], {"type": int, "default": None}),
        (["--batches"], {"type": int, "default": None}),
        (["--retain"], {"default": None, "help": "comma-separated minBatchesToRetain values"}),
        (["--cleanup-every"], {"type": int, "default": None,
                               "help": "clean up every N batches (default 1; a query's "
                                       "spark.dstl.query.cleanupInterval defaults to 10)"}),
        (["--every-n-commits"], {"type": int, "default": None,
                                 "help": "snapshot every N commits (default: the "
                                         "materializer's default)"}),
        (["--rocksdb"], {"default": None,
                         "help": "RocksDB settings other than the defaults, e.g. "
                                 "maxBytesForLevelBase=256MB,targetFileSizeBase=64MB"}),
    ])
    plan = plan_of(args, QUICK, FULL, ("keys", "batches"))
    if args.retain:
        plan["retain"] = [int(r) for r in args.retain.split(",")]
    if args.cleanup_every:
        plan["cleanup_every"] = args.cleanup_every
    report = Report(NAME, args, {**plan, "changed_per_batch": CHANGE_RATE,
                                 "value_bytes": 100,
                                 "rocksdb": args.rocksdb or "defaults",
                                 "materialization": (
                                     "defaults (every 10 commits, background)"
                                     if args.every_n_commits is None else
                                     f"every {args.every_n_commits} commits, background"),
                                 "storage": "file://"})
    results = []
    with profiled(args):
        for retain in plan["retain"]:
            result = run(args, plan, retain)
            results.append(result)
            tail = summarize(result["ratio"][len(result["ratio"]) // 2:])
            print(f"  retain {retain}: final {result['ratio'][-1]:.2f}x, second half p50 "
                  f"{tail['p50']:.2f}x max {tail['max']:.2f}x (lower bound "
                  f"{lower_bound(retain):.2f}x)", flush=True)
    rows = []
    for result in results:
        tail = summarize(result["ratio"][len(result["ratio"]) // 2:])
        rows.append([result["retain"], len(result["ratio"]), result["live_bytes"] / 1e6,
                     result["bytes"][-1] / 1e6, result["ratio"][-1], tail["p50"], tail["max"],
                     lower_bound(result["retain"]),
                     summarize(result["cleanup_seconds"]).get("p50", float("nan")),
                     result["deleted_files"]])
    report.table(f"Checkpoint storage / live state, {plan['keys']:,} keys, 1% changed per "
                 f"batch, cleanup every {plan['cleanup_every']} batch(es)",
                 ["minBatchesToRetain", "batches", "live MB", "final MB", "final ratio",
                  "2nd half p50", "2nd half max", "lower bound", "cleanup s p50",
                  "files deleted"], rows)
    for result in results:
        if lower_bound(result["retain"]) > GOAL:
            continue  # above the goal by construction: information (the table), not a goal
        tail = summarize(result["ratio"][len(result["ratio"]) // 2:])
        report.goal(f"5. space (minBatchesToRetain={result['retain']})",
                    "storage / live state <= 1.5x",
                    f"{tail['max']:.2f}x at most, {tail['p50']:.2f}x median over the second "
                    f"half ({result['ratio'][-1]:.2f}x at the end; lower bound "
                    f"{lower_bound(result['retain']):.2f}x)", tail["max"],
                    tail["max"] <= 1.5)
    report.put("samples", results)
    line_plot(report, list(range(1, plan["batches"] + 1)),
              {f"minBatchesToRetain={r['retain']}": r["ratio"] for r in results},
              f"{plan['keys']:,} keys, 1% changed per batch",
              "batch", "checkpoint storage / live state", hline=1.5, hline_label="goal 1.5x")
    report.save()


if __name__ == "__main__":
    main()
