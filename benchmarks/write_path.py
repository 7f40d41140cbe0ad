"""Benchmark 3: puts/s and gets/s through the StateStore, against raw rocksdict (the limit).

Five contenders write the same keys and values and read them back, in rounds whose order
rotates so that machine noise hits each the same:
  raw           rocksdict alone (same options, WAL off): WriteBatch.put per key, one db.write;
                db.get per key; the user's keys as they are (no column family prefix);
  rocksdb       this backend's StateStore (RocksDB provider), store.put per key, then commit()
                with the durable changelog on file://; store.get per key;
  memory        the in-memory provider, same API and changelog;
  rocksdb bulk  as rocksdb, but all keys in one store.put_many(keys=..., values=...) call
                (columns: a list of keys and a list of values);
  memory bulk   as memory, with put_many columns.
Puts/s count the commit (a put is not durable before it); gets/s read after the commit, always
with store.get per key (the bulk rows differ from their per-call rows only in the writes).

    python -m benchmarks.write_path [--quick] [--keys 1000000] [--rounds 7]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rocksdict import WriteBatch

from benchmarks.harness import Report, parse_args, plan_of, profiled, ratio, scratch, summarize
from benchmarks.plots import bar_plot
from benchmarks.workload import (
    OPERATOR,
    Workload,
    backend_options,
    file_url,
    key,
    open_raw_db,
    rocksdb_settings,
)
from pyspark_dstl.backend.store.api import StateStore, StateStoreProvider
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings

NAME = "write_path"
FULL: dict[str, Any] = {"keys": 1_000_000, "rounds": 7}
QUICK: dict[str, Any] = {"keys": 20_000, "rounds": 3}
PROVIDERS = {"rocksdb": "pyspark_dstl.backend.store.rocksdb_provider.RocksDBChangelogProvider",
             "memory": "pyspark_dstl.backend.store.memory_provider.InMemoryProvider"}
CONTENDERS = ("raw", "rocksdb", "memory", "rocksdb bulk", "memory bulk")
Timing = dict[str, float]
GOALS = {"rocksdb": 0.40, "rocksdb bulk": 0.60}
"""The issue's goals: puts through the RocksDB provider against raw rocksdict; the in-memory
provider's rows and the gets are information."""


class RawContender:
    """rocksdict alone: the physical limit of what a Python state store can do here."""

    def __init__(self, work: Path) -> None:
        self.db = open_raw_db(work / "raw", rocksdb_settings())

    def round(self, items: list[tuple[bytes, bytes]], order: list[bytes]) -> Timing:
        began = time.perf_counter()
        batch = WriteBatch(raw_mode=True)
        put = batch.put
        for user_key, value in items:
            put(user_key, value)
        self.db.write(batch)
        put_seconds = time.perf_counter() - began
        get = self.db.get
        began = time.perf_counter()
        for user_key in order:
            get(user_key)
        get_seconds = time.perf_counter() - began
        return {"put_s": put_seconds, "commit_s": 0.0, "get_s": get_seconds}

    def close(self) -> None:
        self.db.close()


class StoreContender:
    """The backend's StateStore with its changelog on file://."""

    def __init__(self, work: Path, provider_class: str, bulk: bool = False) -> None:
        """`bulk`: write with one put_many(keys=, values=) instead of a put per key."""
        options = backend_options(work / "local", ChangelogSettings(),
                                  provider_class=provider_class)
        self.bulk = bulk
        self.backend = StateBackend(options)
        self.provider: StateStoreProvider = self.backend.provider(file_url(work / "remote"),
                                                                  OPERATOR, 0)
        self.info: Any = None

    def _store(self) -> StateStore:
        if self.info is None:
            return self.provider.get_store(0)
        return self.provider.get_store(self.info.version, self.info)

    def round(self, items: list[tuple[bytes, bytes]], order: list[bytes]) -> Timing:
        store = self._store()
        put = store.put
        keys, values = [k for k, _ in items], [v for _, v in items]
        before = store.metrics()
        began = time.perf_counter()
        if self.bulk:
            store.put_many(keys=keys, values=values)
        else:
            for user_key, value in items:
                put(user_key, value)
        put_seconds = time.perf_counter() - began
        during = store.metrics()
        began = time.perf_counter()
        self.info = store.commit()
        commit_seconds = time.perf_counter() - began
        encode = during["flush_encode_seconds"] - before["flush_encode_seconds"]
        engine = during["flush_engine_seconds"] - before["flush_engine_seconds"]
        store = self._store()
        get = store.get
        began = time.perf_counter()
        for user_key in order:
            get(user_key)
        get_seconds = time.perf_counter() - began
        store.abort()
        return {"put_s": put_seconds, "commit_s": commit_seconds, "get_s": get_seconds,
                "encode_s": encode, "engine_s": engine,
                "cache_s": max(0.0, put_seconds - encode - engine)}

    def close(self) -> None:
        self.backend.close()


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or NAME, argv, [
        (["--keys"], {"type": int, "default": None}),
        (["--rounds"], {"type": int, "default": None}),
    ])
    plan = plan_of(args, QUICK, FULL, ("keys", "rounds"))
    report = Report(NAME, args, {**plan, "value_bytes": 100, "storage": "file://",
                                 "order": "contenders rotate every round; gets in random order"})
    workload = Workload(plan["keys"], 1.0, seed=args.seed)
    order = [key(int(i)) for i in np.random.default_rng(args.seed).permutation(plan["keys"])]
    timings: dict[str, list[Timing]] = {name: [] for name in CONTENDERS}
    with scratch(args, "write") as work, profiled(args):
        contenders: dict[str, Any] = {
            "raw": RawContender(work),
            "rocksdb": StoreContender(work / "rocksdb", PROVIDERS["rocksdb"]),
            "memory": StoreContender(work / "memory", PROVIDERS["memory"]),
            "rocksdb bulk": StoreContender(work / "rocksdb_bulk", PROVIDERS["rocksdb"],
                                           bulk=True),
            "memory bulk": StoreContender(work / "memory_bulk", PROVIDERS["memory"], bulk=True),
        }
        try:
            for number in range(plan["rounds"]):
                items = [(key(i), v) for i, v in enumerate(workload.values(plan["keys"]))]
                shift = number % len(CONTENDERS)
                for name in CONTENDERS[shift:] + CONTENDERS[:shift]:
                    timings[name].append(contenders[name].round(items, order))
                print(f"  round {number + 1}/{plan['rounds']}: " + ", ".join(
                    f"{n} {plan['keys'] / total_put(timings[n][-1]):,.0f} puts/s"
                    for n in CONTENDERS), flush=True)
        finally:
            for contender in contenders.values():
                contender.close()
    tabulate(report, timings, plan["keys"])
    report.put("samples", timings)
    report.save()


def total_put(timing: Timing) -> float:
    return timing["put_s"] + timing["commit_s"]


def rates(timings: list[Timing], keys: int, seconds: Callable[[Timing], float]) -> list[float]:
    return [keys / seconds(t) for t in timings]


def tabulate(report: Report, timings: dict[str, list[Timing]], keys: int) -> None:
    put_rates = {n: rates(t, keys, total_put) for n, t in timings.items()}
    get_rates = {n: rates(t, keys, lambda t: t["get_s"]) for n, t in timings.items()}
    raw_put = summarize(put_rates["raw"])["p50"]
    raw_get = summarize(get_rates["raw"])["p50"]
    rows = []
    for name in CONTENDERS:
        puts, gets = summarize(put_rates[name]), summarize(get_rates[name])
        commit_ms = summarize([t["commit_s"] * 1000 for t in timings[name]])["p50"]
        rows.append([name, len(timings[name]), puts["p50"], puts["min"], puts["max"],
                     commit_ms, ratio(puts["p50"], raw_put), gets["p50"], gets["min"],
                     gets["max"], ratio(gets["p50"], raw_get)])
    report.table(f"Write path, {keys:,} puts and gets of 100-byte values per round "
                 f"(median over rounds)",
                 ["contender", "rounds", "puts/s p50", "puts/s min", "puts/s max",
                  "commit ms p50", "puts vs raw", "gets/s p50", "gets/s min", "gets/s max",
                  "gets vs raw"], rows)
    bar_plot(report, ["puts/s", "gets/s"],
             {name: [summarize(put_rates[name])["p50"], summarize(get_rates[name])["p50"]]
              for name in CONTENDERS},
             f"{keys:,} keys, median over rounds", "operations per second")
    parts = [["raw", summarize([t["put_s"] for t in timings["raw"]])["p50"], 0.0, 0.0, 0.0]]
    for name in CONTENDERS[1:]:
        runs = timings[name]
        parts.append([name, *(summarize([t[part] for t in runs])["p50"]
                              for part in ("cache_s", "encode_s", "engine_s", "commit_s"))])
    report.table(f"Where a round of {keys:,} puts goes (p50 s): columns and cache = put or "
                 f"put_many itself (the cache's dicts, or the columns' lengths and joins); "
                 f"payload = encoding flushes and appending them to the changelog; engine = "
                 f"RocksDB writes inside the transaction (a WriteBatch, or a table file built "
                 f"in columns and ingested); commit = the final flush and the wait for the "
                 f"durable changelog (its engine write runs after it returns)",
                 ["contender", "columns and cache", "payload", "engine", "commit"], parts)
    for name, goal in GOALS.items():
        provider, _, bulk = name.partition(" ")
        api = "put_many columns" if bulk else "put per key"
        put_share = ratio(summarize(put_rates[name])["p50"], raw_put)
        get_share = ratio(summarize(get_rates[name])["p50"], raw_get)
        report.goal(f"3. write path ({provider} provider, {api})",
                    f"puts/s >= {goal:.0%} of raw rocksdict WriteBatch",
                    f"puts {put_share:.0%} of raw (gets {get_share:.0%})",
                    put_share, put_share >= goal)


if __name__ == "__main__":
    main()
