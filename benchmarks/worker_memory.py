"""Sizing: the memory a Python worker needs for the RocksDB state stores it keeps open.

Each configuration runs in a fresh Python process (a process's RSS does not shrink back, so
configurations must not share one). The process imports the backend and reads its RSS (the
baseline: interpreter, numpy, rocksdict), opens `stores` state stores under one file://
checkpoint location with the default settings (or those given with --setting), loads `keys`
keys of 100 random bytes into each and commits, then runs `batches` batches that rewrite 1% of
every store's keys and commit. RSS is read after the load and after the batches (steady);
the peak is the process's maximum RSS. What the stores add is RSS minus the baseline; the
settings that bound it are the memtable per store (`rocksdb.writeBufferSize`), the block cache
per process (`rocksdb.blockCacheSize`) and the write cache per open transaction
(`stateStore.txCache.maxSize`), all in docs/configuration.md.

    python -m benchmarks.worker_memory [--quick] [--keys 1000000] [--stores 1,4] [--batches 20]
                                       [--setting rocksdb.writeBufferSize=16MB ...]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import Report, parse_args, plan_of, scratch

NAME = "worker_memory"
FULL: dict[str, Any] = {"keys": 1_000_000, "stores": [1, 4], "batches": 20}
QUICK: dict[str, Any] = {"keys": 50_000, "stores": [1, 2], "batches": 5}
CHANGE_RATE = 0.01
MB = 1024 * 1024


def rss_bytes() -> int:
    """The process's resident set size now (Linux: VmRSS of /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status (this benchmark needs Linux)")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kilobytes


def measure(request: dict[str, Any]) -> dict[str, Any]:
    """In the child process: the RSS of each phase for one configuration."""
    from benchmarks.workload import OPERATOR, Workload, file_url, load_store
    from pyspark_dstl.backend.backend_settings import BackendSettings
    from pyspark_dstl.backend.store.state_backend import StateBackend

    work = Path(request["work"])
    settings = BackendSettings.from_mapping({**request["settings"],
                                             "spark.dstl.stateStore.localDir":
                                                 str(work / "local")})
    baseline = rss_bytes()
    workloads = [Workload(request["keys"], CHANGE_RATE, seed=request["seed"] + partition)
                 for partition in range(request["stores"])]
    with StateBackend(settings) as backend:
        location = file_url(work / "checkpoint")
        providers = [backend.provider(location, OPERATOR, p) for p in range(len(workloads))]
        commits = []
        for provider, workload in zip(providers, workloads, strict=True):
            store = provider.get_store(0)
            load_store(store, workload)
            commits.append(store.commit())
        loaded = rss_bytes()
        for _ in range(request["batches"]):
            for p, (provider, workload) in enumerate(zip(providers, workloads, strict=True)):
                store = provider.get_store(commits[p].version, commits[p])
                for user_key, value in workload.step():
                    store.put(user_key, value)
                commits[p] = store.commit()
        steady = rss_bytes()
    return {"baseline": baseline, "loaded": loaded, "steady": steady,
            "peak": peak_rss_bytes()}


def run_child(args: argparse.Namespace, plan: dict[str, Any], stores: int,
              settings: dict[str, str]) -> dict[str, Any]:
    with scratch(args, f"memory-{stores}") as work:
        request = {"work": str(work), "keys": plan["keys"], "stores": stores,
                   "batches": plan["batches"], "seed": args.seed, "settings": settings}
        done = subprocess.run([sys.executable, "-m", "benchmarks.worker_memory", "--child",
                               json.dumps(request)], capture_output=True, text=True,
                              check=False)
    if done.returncode != 0:
        raise SystemExit(f"the measuring process failed:\n{done.stderr}")
    return {"stores": stores, **json.loads(done.stdout.strip().splitlines()[-1])}


def parse_settings(items: Sequence[str]) -> dict[str, str]:
    settings = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--setting {item!r}: expected KEY=VALUE")
        key = key.strip()
        settings[key if key.startswith("spark.dstl.") else "spark.dstl." + key] = value
    return settings


def main(argv: Sequence[str] | None = None) -> None:
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(measure(json.loads(sys.argv[2]))))
        return
    args = parse_args(__doc__ or NAME, argv, [
        (["--keys"], {"type": int, "default": None, "help": "keys per store"}),
        (["--stores"], {"default": None, "help": "comma-separated numbers of open stores"}),
        (["--batches"], {"type": int, "default": None}),
        (["--setting"], {"action": "append", "default": [], "metavar": "KEY=VALUE",
                         "help": "a spark.dstl.* setting other than its default"}),
    ])
    plan = plan_of(args, QUICK, FULL, ("keys", "batches"))
    if args.stores:
        plan["stores"] = [int(s) for s in args.stores.split(",")]
    settings = parse_settings(args.setting)
    report = Report(NAME, args, {**plan, "value_bytes": 100, "changed_per_batch": CHANGE_RATE,
                                 "settings": settings or "defaults", "storage": "file://"})
    results = [run_child(args, plan, stores, settings) for stores in plan["stores"]]
    rows = [[r["stores"], plan["keys"], r["baseline"] / MB, r["loaded"] / MB,
             r["steady"] / MB, r["peak"] / MB, (r["steady"] - r["baseline"]) / MB / r["stores"],
             (r["peak"] - r["baseline"]) / MB / r["stores"]] for r in results]
    report.table(f"Python worker RSS (MiB), {plan['keys']:,} keys of 100 bytes per store, "
                 f"{plan['batches']} batches of 1% changes",
                 ["stores", "keys/store", "baseline", "loaded", "steady", "peak",
                  "steady - baseline per store", "peak - baseline per store"], rows)
    report.put("samples", results)
    report.save()


if __name__ == "__main__":
    main()
