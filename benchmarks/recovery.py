"""Benchmark 4: restore time vs changelog length since the last materialization.

One store of `keys` keys is materialized at version 1; then `batches` commits each rewrite 1%
of the keys with materialization off. A cold process (fresh local directory, no caches)
restores it at version 1 (snapshot, empty changelog), 1 + 10 and 1 + 100 (snapshot plus 10 or
100 batches of changelog), and from a snapshot taken of the final state ("snapshot only": what
a restore costs when every checkpoint is a snapshot). Restores rotate order in every round.

    python -m benchmarks.recovery [--quick] [--storage file,s3] [--keys 1000000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import Report, parse_args, plan_of, profiled, ratio, scratch, summarize
from benchmarks.latency import LatencyModel
from benchmarks.plots import bar_plot
from benchmarks.s3 import S3Harness
from benchmarks.workload import OPERATOR, Workload, backend_options, file_url, load_store
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings

NAME = "recovery"
FULL: dict[str, Any] = {"keys": 1_000_000, "lengths": [0, 10, 100], "rounds": 5}
QUICK: dict[str, Any] = {"keys": 5_000, "lengths": [0, 2, 5], "rounds": 2}
S3_LATENCY = LatencyModel(first_byte_median=0.020, first_byte_sigma=0.35, bandwidth=200e6)
NO_SNAPSHOTS = MaterializerSettings(interval=None, every_n_commits=None,
                                   backstop_bytes=1 << 50)
SAMPLE = 200
PHASES = {"snapshot": "snapshot_restore_seconds",
          "read wait": "replay_read_wait_seconds",
          "decode and check": "replay_decode_seconds",
          "last write per key": "replay_coalesce_seconds",
          "wait for engine write": "replay_apply_wait_seconds"}
"""Where a restore's time goes (the store's load metrics): the snapshot's files restored;
then the replay: waiting for changelog reads, decoding and checking payloads, finding each
key's last write (numpy sort and gather), waiting for the engine write of what remains (a
table file built in columns and ingested, on a thread of its own beside the next window's
sort). The write's own time ("engine write, beside the rest") overlaps the others."""


@dataclass
class Target:
    kind: str
    url: str
    options: ChangelogSettings


def build(target: Target, workload: Workload, lengths: list[int], work: Path,
          ) -> tuple[dict[str, StoreCommit], dict[bytes, bytes]]:
    """The checkpoints to restore, by label, and a sample of the final state to verify."""
    infos: dict[str, StoreCommit] = {}
    options = backend_options(work / "writer", target.options, NO_SNAPSHOTS)
    with StateBackend(options) as backend:
        provider = backend.provider(target.url, OPERATOR, 0)
        store = provider.get_store(0)
        load_store(store, workload)
        info = store.commit(materialize=True)
        for done in range(max(lengths) + 1):
            if done in lengths:
                infos[f"snapshot + {done} batches"] = info
            if done == max(lengths):
                break
            store = provider.get_store(info.version, info)
            for user_key, value in workload.step():
                store.put(user_key, value)
            info = store.commit()
        store = provider.get_store(info.version, info)
        sample_keys = [k for k, _ in workload.step()][:SAMPLE]
        expected = dict(zip(sample_keys, store.multi_get(sample_keys), strict=True))
        infos["snapshot only (final state)"] = store.commit(materialize=True)
    return infos, {k: v for k, v in expected.items() if v is not None}


def restore(target: Target, info: StoreCommit, work: Path,
            expected: dict[bytes, bytes] | None) -> dict[str, Any]:
    """Restore in a fresh backend (cold local caches); seconds and the load metrics."""
    options = backend_options(work, target.options, NO_SNAPSHOTS)
    with StateBackend(options) as backend:
        provider = backend.provider(target.url, OPERATOR, 0)
        began = time.perf_counter()
        store = provider.get_store(info.version, info)
        seconds = time.perf_counter() - began
        metrics = dict(store.metrics())
        if expected:
            wrong = [k for k, v in expected.items() if store.get(k) != v]
            if wrong:
                raise AssertionError(f"restored state differs at {len(wrong)} sampled keys, "
                                     f"e.g. {wrong[0]!r}")
        store.abort()
    return {"seconds": seconds, "replayed_records": metrics.get("replayed_records", 0),
            "replayed_bytes": metrics.get("replayed_bytes", 0),
            "load_kind": metrics.get("load_kind"),
            "engine write": metrics.get("replay_apply_seconds", 0.0),
            **{phase: metrics.get(key, 0.0) for phase, key in PHASES.items()}}


def run_storage(report: Report, args: argparse.Namespace, target: Target,
                plan: dict[str, Any], work: Path) -> dict[str, list[dict[str, Any]]]:
    workload = Workload(plan["keys"], 0.01, seed=args.seed)
    began = time.perf_counter()
    infos, expected = build(target, workload, plan["lengths"], work / "build")
    print(f"  {target.kind}: built {len(infos)} checkpoints in "
          f"{time.perf_counter() - began:.1f} s", flush=True)
    final = f"snapshot + {max(plan['lengths'])} batches"
    labels = list(infos)
    results: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    for number in range(plan["rounds"]):
        shift = number % len(labels)
        for label in labels[shift:] + labels[:shift]:
            check = expected if label in (final, "snapshot only (final state)") else None
            with scratch(args, "restore") as local:
                results[label].append(restore(target, infos[label], local, check))
        print(f"  {target.kind}: round {number + 1}/{plan['rounds']}: " + ", ".join(
            f"{label} {results[label][-1]['seconds']:.2f} s" for label in labels), flush=True)
    return results


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or NAME, argv, [
        (["--storage"], {"default": "file,s3", "help": "comma-separated: file, s3"}),
        (["--keys"], {"type": int, "default": None}),
        (["--rounds"], {"type": int, "default": None}),
    ])
    plan = plan_of(args, QUICK, FULL, ("keys", "rounds"))
    kinds = [k.strip() for k in args.storage.split(",") if k.strip()]
    report = Report(NAME, args, {**plan, "storage": kinds, "changed_per_batch": 0.01,
                                 "value_bytes": 100, "s3_latency_model": S3_LATENCY.to_dict(),
                                 "s3_latency_model_text": S3_LATENCY.describe()})
    measured: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with profiled(args):
        for kind in kinds:
            with scratch(args, f"recovery-{kind}") as work:
                if kind == "s3":
                    with S3Harness(seed=args.seed) as s3:
                        s3.set_latency(S3_LATENCY)
                        target = Target("s3", s3.new_root("recovery"), s3.options())
                        measured[kind] = run_storage(report, args, target, plan, work)
                else:
                    target = Target("file", file_url(work / "remote"), ChangelogSettings())
                    measured[kind] = run_storage(report, args, target, plan, work)
            tabulate(report, kind, measured[kind], plan)
    report.put("samples", measured)
    kinds_done = list(measured)
    labels = list(measured[kinds_done[0]]) if kinds_done else []
    bar_plot(report, labels,
             {kind: [summarize([r["seconds"] for r in measured[kind][label]])["p50"]
                     for label in labels] for kind in kinds_done},
             f"Restore of {plan['keys']:,} keys (median of {plan['rounds']} cold restores)",
             "seconds")
    report.save()


def tabulate(report: Report, kind: str, results: dict[str, list[dict[str, Any]]],
             plan: dict[str, Any]) -> None:
    snapshot_only = summarize([r["seconds"] for r in results["snapshot only (final state)"]])
    rows = []
    for label, runs in results.items():
        stats = summarize([r["seconds"] for r in runs])
        rows.append([label, stats["n"], stats["p50"], stats["min"], stats["max"],
                     runs[0]["replayed_records"], runs[0]["replayed_bytes"] / 1e6,
                     ratio(stats["p50"], snapshot_only["p50"])])
    report.table(f"Restore time on {kind}:// of {plan['keys']:,} keys (cold local directory)",
                 ["checkpoint", "n", "p50 s", "min s", "max s", "replayed records",
                  "replayed MB", "vs snapshot only"], rows)
    phase_rows = []
    for label, runs in results.items():
        parts = [summarize([r.get(phase, 0.0) for r in runs])["p50"] for phase in PHASES]
        total = summarize([r["seconds"] for r in runs])["p50"]
        beside = summarize([r.get("engine write", 0.0) for r in runs])["p50"]
        phase_rows.append([label, *parts, max(0.0, total - sum(parts)), total, beside])
    report.table(f"Where a restore's time goes on {kind}:// (p50 s of each part): snapshot = "
                 f"its files restored and RocksDB opened; read wait = the replay waiting for "
                 f"changelog reads; last write per key = numpy sort and gather; wait for engine "
                 f"write = the replay waiting for the table file of the window before (built "
                 f"in columns and ingested, beside the next window's sort); the last column is "
                 f"that write's own time, which overlaps the others",
                 ["checkpoint", *PHASES, "other", "total", "engine write, beside the rest"],
                 phase_rows)
    longest = max(plan["lengths"])
    value = ratio(summarize([r["seconds"] for r in results[f"snapshot + {longest} batches"]]
                            )["p50"], snapshot_only["p50"])
    report.goal(f"4. recovery with {longest} batches of changelog ({kind})",
                f"restore with {longest} batches <= 2x snapshot-only",
                f"{value:.2f}x snapshot-only", value, value <= 2.0)


if __name__ == "__main__":
    main()
