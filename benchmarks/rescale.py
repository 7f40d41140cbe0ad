"""Rescale benchmark: a rescale's time and bytes against a full restore of the same state.

A checkpoint of `keys` keys (one bigint grouping key each, as the Spark integration stores
them: the 2-byte key group then the msgpack key, in a value state, 100 random bytes per value) is
written over `from` partitions, every key in the partition owning its key group, each store
one snapshot; and the same state in the hash layout of checkpoints written before key groups
(bare msgpack keys, each in partition pmod(Spark's hash, `from`)). Then, alternating in every
round, from cold local directories:
- restore: every partition's store of the key-group checkpoint loaded at its checkpoint, two
  at a time (what a restart of the query reads);
- rescale: `python -m pyspark_dstl rescale`'s work on it, to `to` partitions, by moving ranges
  of key groups (backend/rescale/ranges.py): old stores restored, each new store a clipped
  RocksDB checkpoint of the old store it overlaps most plus the other's share copied as a
  range, committed as a snapshot that names the files the old store already had where they
  are (nothing uploaded or copied for them);
- migration: the one-time migration of the hash-layout checkpoint to key groups over `to`
  partitions (every key decoded, hashed in numpy, given its group and ingested into its new
  store; the new stores committed as snapshots).
The commit log entry (one small file) is left out of all.
Bytes: what each reads from the checkpoint (snapshot files) and what the rescale writes. On S3
the proxy's byte counts are recorded too, and requests get the recovery benchmark's latency.

Beside them (file only, unless --no-spark): Spark's own offline repartition
(`StreamingCheckpointManager.repartition`, Spark 4.2+, reached in PySpark 4.3 as
`spark._streamingCheckpointManager`) of an equal Spark checkpoint: a stopped streaming
`groupBy(k).agg(max(v))` over the same number of keys with 100-character values, RocksDB state
store provider, `from` shuffle partitions, local[2]; each round repartitions it to `to` and
back.

    python -m benchmarks.rescale [--quick] [--storage file,s3] [--keys 1000000] [--no-spark]
        [--no-migration]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import Report, parse_args, plan_of, profiled, ratio, scratch, summarize
from benchmarks.recovery import S3_LATENCY
from benchmarks.s3 import S3Harness
from benchmarks.workload import backend_options, file_url
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.rescale.key_by_key import PARALLEL_LOADS, rescale_stores, restore_bytes
from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS, owner
from pyspark_dstl.backend.rescale.ranges import rescale_ranges
from pyspark_dstl.backend.store.provider import ChangelogProvider
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings
from pyspark_dstl.spark.codec.values import encode_key, pack_key
from pyspark_dstl.spark.keys.key_routing import HashLayoutMigration, key_offset
from pyspark_dstl.spark.keys.spark_hash import hash_longs

NAME = "rescale"
FULL: dict[str, Any] = {"keys": 1_000_000, "from": 4, "to": 6, "rounds": 3}
QUICK: dict[str, Any] = {"keys": 20_000, "from": 3, "to": 5, "rounds": 1}
OPERATOR = "stateful"
HASH_OPERATOR = "hash_layout"  # the same state in the hash layout, beside it in the root
CF = "value/state"
VALUE_SIZE = 100
CHUNK = 200_000
NO_SNAPSHOTS = MaterializerSettings(interval=None, every_n_commits=None,
                                   backstop_bytes=1 << 50)


@dataclass
class Target:
    kind: str
    url: str
    options: ChangelogSettings
    s3: S3Harness | None = None


Layout = Callable[[np.ndarray, int], tuple[np.ndarray, list[bytes]]]
"""(key numbers, partitions) -> each key's partition and its stored key."""


def group_layout(numbers: np.ndarray, partitions: int) -> tuple[np.ndarray, list[bytes]]:
    """Key groups: each key in the partition owning pmod(Spark's hash, G), stored after its
    group, as the stateful stage stores it."""
    groups = hash_longs(numbers).astype(np.int64) % KEY_GROUPS
    return owner(groups, partitions, KEY_GROUPS), [
        encode_key([number], group)
        for number, group in zip(numbers.tolist(), groups.tolist(), strict=True)]


def hash_layout(numbers: np.ndarray, partitions: int) -> tuple[np.ndarray, list[bytes]]:
    """The layout before key groups: the partition Spark's hash of the bigint key picks, the
    msgpack key without a key group."""
    owners = hash_longs(numbers).astype(np.int64) % partitions
    return owners, [pack_key([int(n)]) for n in numbers]


def generated(keys: int, seed: int) -> Iterator[tuple[np.ndarray, bytes]]:
    """The input a chunk at a time: key numbers and their values' bytes (VALUE_SIZE each)."""
    rng = np.random.default_rng(seed)
    for start in range(0, keys, CHUNK):
        numbers = np.arange(start, min(keys, start + CHUNK), dtype=np.int64)
        yield numbers, rng.bytes(len(numbers) * VALUE_SIZE)


def build(target: Target, keys: int, partitions: int, seed: int, work: Path,
          layout: Layout = group_layout, operator: str = OPERATOR
          ) -> dict[int, StoreCommit]:
    """One snapshot per partition holding its keys (where `layout` puts them)."""
    options = backend_options(work, target.options, NO_SNAPSHOTS)
    with StateBackend(options) as backend:
        stores = []
        for partition in range(partitions):
            provider = backend.provider(target.url, operator, partition)
            assert isinstance(provider, ChangelogProvider)
            stores.append(provider.get_empty_store_after(0))
        for numbers, blob in generated(keys, seed):
            owners, encoded = layout(numbers, partitions)
            values = [blob[i * VALUE_SIZE:(i + 1) * VALUE_SIZE] for i in range(len(numbers))]
            for partition, store in enumerate(stores):
                chosen = np.flatnonzero(owners == partition)
                store.ingest(CF, [encoded[i] for i in chosen], [values[i] for i in chosen])
        return {p: store.commit(materialize=True) for p, store in enumerate(stores)}


def restore_all(target: Target, infos: dict[int, StoreCommit], work: Path,
                ) -> dict[str, Any]:
    """Every store loaded at its checkpoint in a fresh backend (cold local directory), as
    many at once as the rescale restores its old stores."""
    options = backend_options(work, target.options, NO_SNAPSHOTS)
    began = time.perf_counter()
    with StateBackend(options) as backend:

        def load(item: tuple[int, StoreCommit]) -> int:
            partition, info = item
            store = backend.provider(target.url, OPERATOR, partition).get_store(
                info.version, info)
            keys = int(store.metrics()["estimated_keys"])
            store.abort()
            return keys

        with ThreadPoolExecutor(PARALLEL_LOADS) as pool:
            keys = sum(pool.map(load, sorted(infos.items())))
    return {"seconds": time.perf_counter() - began, "estimated_keys": keys,
            "bytes_read": sum(restore_bytes(info) for info in infos.values())}


def rescale_all(target: Target, infos: dict[int, StoreCommit], partitions: int,
                work: Path) -> dict[str, Any]:
    """The range rescale of the key-group checkpoint."""
    options = backend_options(work, target.options, NO_SNAPSHOTS)
    began = time.perf_counter()
    _, stats = rescale_ranges(options, target.url, OPERATOR, infos, partitions, KEY_GROUPS,
                              key_offset)
    return {"seconds": time.perf_counter() - began, **stats.to_dict()}


def migrate_all(target: Target, infos: dict[int, StoreCommit], partitions: int,
                work: Path) -> dict[str, Any]:
    """The one-time migration of the hash-layout checkpoint to key groups, key by key."""
    options = backend_options(work, target.options, NO_SNAPSHOTS)
    began = time.perf_counter()
    _, stats = rescale_stores(options, target.url, HASH_OPERATOR, infos, partitions,
                              HashLayoutMigration(["bigint"], partitions, KEY_GROUPS))
    return {"seconds": time.perf_counter() - began, **stats.to_dict()}


def measured_on_wire(target: Target, action: Any) -> dict[str, Any]:
    """`action()`'s result plus, on S3, the bytes the proxy saw go out and come in."""
    if target.s3 is not None:
        target.s3.reset_log()
    result: dict[str, Any] = action()
    if target.s3 is not None:
        stats = target.s3.stats()
        result["wire_bytes_out"] = stats.get("bytes_out", 0)
        result["wire_bytes_in"] = stats.get("bytes_in", 0)
        result["requests"] = stats.get("count", 0)
    return result


def run_storage(args: argparse.Namespace, target: Target, plan: dict[str, Any],
                work: Path) -> dict[str, list[dict[str, Any]]]:
    began = time.perf_counter()
    infos = build(target, plan["keys"], plan["from"], args.seed, work / "build")
    hashed = ({} if args.no_migration else
              build(target, plan["keys"], plan["from"], args.seed, work / "build-hash",
                    hash_layout, HASH_OPERATOR))
    print(f"  {target.kind}: built {plan['keys']:,} keys over {plan['from']} partitions "
          f"({'key groups' if args.no_migration else 'key groups and the hash layout'}) in "
          f"{time.perf_counter() - began:.1f} s", flush=True)
    actions: dict[str, Callable[[Path], dict[str, Any]]] = {
        "restore": lambda local: restore_all(target, infos, local),
        "rescale": lambda local: rescale_all(target, infos, plan["to"], local)}
    if hashed:
        actions["migration"] = lambda local: migrate_all(target, hashed, plan["to"], local)
    results: dict[str, list[dict[str, Any]]] = {label: [] for label in actions}
    for number in range(plan["rounds"]):
        labels = list(actions)
        order = labels if number % 2 == 0 else labels[::-1]
        for label in order:
            with scratch(args, label) as local:
                results[label].append(measured_on_wire(
                    target, lambda label=label, local=local: actions[label](local)))
        print(f"  {target.kind}: round {number + 1}/{plan['rounds']}: " + ", ".join(
            f"{label} {results[label][-1]['seconds']:.2f} s" for label in labels), flush=True)
    return results


ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def run_spark(args: argparse.Namespace, plan: dict[str, Any], work: Path,
              ) -> list[dict[str, Any]]:
    """Spark's offline repartition of an equal Spark checkpoint, `from` -> `to` and back."""
    import pandas as pd
    from pyspark.sql import functions as F

    from tests.support.spark import build_session

    spark = build_session(master="local[2]", app_name="pyspark-dstl-bench-rescale",
                          spark_defaults=True, extra={
        "spark.sql.shuffle.partitions": str(plan["from"]),
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER})
    try:
        rng = np.random.default_rng(args.seed)
        letters = rng.integers(97, 123, size=(plan["keys"], VALUE_SIZE), dtype=np.uint8)
        inputs = work / "spark-in"
        inputs.mkdir(parents=True)
        pd.DataFrame({"k": np.arange(plan["keys"], dtype=np.int64),
                      "v": [row.tobytes().decode() for row in letters]}).to_parquet(
            inputs / "part-0.parquet")
        checkpoint = work / "spark-checkpoint"
        began = time.perf_counter()
        query = (spark.readStream.schema("k long, v string").parquet(str(inputs))
                 .groupBy("k").agg(F.max("v").alias("v")).writeStream.format("noop")
                 .outputMode("update").option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        state_bytes = sum(f.stat().st_size for f in (checkpoint / "state").rglob("*")
                          if f.is_file())
        print(f"  spark: built its checkpoint ({state_bytes / 1e6:.0f} MB of state) in "
              f"{time.perf_counter() - began:.1f} s", flush=True)
        manager = spark._streamingCheckpointManager
        results = []
        for number in range(plan["rounds"]):
            timed: dict[str, float] = {"state_bytes": state_bytes}
            for label, partitions in (("to", plan["to"]), ("back", plan["from"])):
                began = time.perf_counter()
                manager.repartition(str(checkpoint), partitions)
                timed[f"{label}_seconds"] = time.perf_counter() - began
            print(f"  spark: round {number + 1}/{plan['rounds']}: repartition "
                  f"{timed['to_seconds']:.2f} s, back {timed['back_seconds']:.2f} s",
                  flush=True)
            results.append(timed)
        return results
    finally:
        spark.stop()


def tabulate_spark(report: Report, ours: dict[str, list[dict[str, Any]]],
                   spark: list[dict[str, Any]], plan: dict[str, Any]) -> None:
    rescale = summarize([r["seconds"] for r in ours["rescale"]])
    to = summarize([r["to_seconds"] for r in spark])
    back = summarize([r["back_seconds"] for r in spark])
    rows = [[f"pyspark-dstl rescale {plan['from']} -> {plan['to']}", rescale["n"],
             rescale["p50"], ours["rescale"][0]["bytes_read"] / 1e6, 1.0],
            [f"Spark repartition {plan['from']} -> {plan['to']}", to["n"], to["p50"],
             spark[0]["state_bytes"] / 1e6, ratio(to["p50"], rescale["p50"])],
            [f"Spark repartition {plan['to']} -> {plan['from']}", back["n"], back["p50"],
             spark[0]["state_bytes"] / 1e6, ratio(back["p50"], rescale["p50"])]]
    report.table(f"Against Spark's offline repartition on file:// ({plan['keys']:,} keys)",
                 ["operation", "n", "p50 s", "state MB", "time vs pyspark-dstl"], rows)
    value = ratio(to["p50"], rescale["p50"])
    report.goal(f"9. rescale {plan['from']} -> {plan['to']} of {plan['keys']:,} keys vs Spark",
                "far less time than Spark's offline repartition of an equal checkpoint",
                f"Spark takes {value:.1f}x as long", value, value > 1.0)


def _wire(result: dict[str, Any]) -> float:
    return (result.get("wire_bytes_out", 0) + result.get("wire_bytes_in", 0)) / 1e6


def tabulate(report: Report, kind: str, results: dict[str, list[dict[str, Any]]],
             plan: dict[str, Any]) -> None:
    restore = summarize([r["seconds"] for r in results["restore"]])
    first_restore = results["restore"][0]
    rows = [["restore (all partitions)", restore["n"], restore["p50"], restore["min"],
             restore["max"], first_restore["bytes_read"] / 1e6, 0.0, 0.0,
             _wire(first_restore), 1.0]]
    names = {"rescale": f"rescale {plan['from']} -> {plan['to']} (ranges of key groups)",
             "migration": f"migration to key groups, {plan['from']} -> {plan['to']} (key by "
                          f"key, once)"}
    for label in ("rescale", "migration"):
        if label not in results:
            continue
        timed = summarize([r["seconds"] for r in results[label]])
        first = results[label][0]
        uploaded = first["bytes_uploaded"] if label == "rescale" else first["bytes_written"]
        rows.append([names[label], timed["n"], timed["p50"], timed["min"], timed["max"],
                     first["bytes_read"] / 1e6, uploaded / 1e6, first["bytes_shared"] / 1e6,
                     _wire(first), ratio(timed["p50"], restore["p50"])])
    report.table(f"Rescale vs restore on {kind}:// of {plan['keys']:,} keys",
                 ["operation", "n", "p50 s", "min s", "max s", "read MB", "uploaded MB",
                  "old files named in place MB", "on the wire MB (S3)", "time vs restore"], rows)
    phases = [[name, summarize([r[f"{name}_seconds"] for r in results["rescale"]])["p50"]]
              for name in ("load", "clip", "copy", "write")]
    report.table(f"Range rescale phases on {kind}:// (p50 s, summed over the stores worked on "
                 f"at once): load = restore the old stores; clip = RocksDB checkpoint of the "
                 f"base store and range deletes; copy = the other old store's share as a range; "
                 f"write = snapshots of the new stores (files of the base named in place)",
                 ["phase", "p50 s"], phases)
    copied = results["rescale"][0]
    report.note(f"{kind}: the range rescale copied {copied['keys_copied']:,} keys one by one "
                f"(the shares of the other old stores and the timer index), "
                f"{copied['files_shared']} old files named in place")
    value = ratio(summarize([r["seconds"] for r in results["rescale"]])["p50"], restore["p50"])
    report.goal(f"9. rescale {plan['from']} -> {plan['to']} of {plan['keys']:,} keys ({kind})",
                "rescale <= 1.5x a restore of the same state", f"{value:.2f}x restore", value,
                value <= 1.5)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or NAME, argv, [
        (["--storage"], {"default": "file,s3", "help": "comma-separated: file, s3"}),
        (["--keys"], {"type": int, "default": None}),
        (["--rounds"], {"type": int, "default": None}),
        (["--no-spark"], {"action": "store_true",
                          "help": "leave out Spark's own repartition (file only otherwise)"}),
        (["--no-migration"], {"action": "store_true",
                              "help": "leave out the migration from the hash layout"}),
    ])
    plan = plan_of(args, QUICK, FULL, ("keys", "rounds"))
    kinds = [k.strip() for k in args.storage.split(",") if k.strip()]
    report = Report(NAME, args, {**plan, "storage": kinds, "value_bytes": VALUE_SIZE,
                                 "key": "one bigint grouping key",
                                 "s3_latency_model": S3_LATENCY.to_dict(),
                                 "s3_latency_model_text": S3_LATENCY.describe()})
    report.note("read MB: snapshot and changelog bytes of the checkpoints loaded; uploaded MB: "
                "snapshot bytes sent by this process; old files named in place MB: the old "
                "stores' snapshot files the new snapshots name where they are (neither sent "
                "nor copied); on the wire: both directions at the S3 proxy, requests "
                "included")
    measured: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with profiled(args):
        for kind in kinds:
            with scratch(args, f"rescale-{kind}") as work:
                if kind == "s3":
                    with S3Harness(seed=args.seed) as s3:
                        s3.set_latency(S3_LATENCY)
                        target = Target("s3", s3.new_root("rescale"), s3.options(), s3)
                        measured[kind] = run_storage(args, target, plan, work)
                else:
                    target = Target("file", file_url(work / "remote"), ChangelogSettings())
                    measured[kind] = run_storage(args, target, plan, work)
            tabulate(report, kind, measured[kind], plan)
        if "file" in measured and not args.no_spark:
            with scratch(args, "rescale-spark") as work:
                spark = run_spark(args, plan, work)
            tabulate_spark(report, measured["file"], spark, plan)
            report.put("spark_samples", spark)
    report.put("samples", measured)
    report.save()


if __name__ == "__main__":
    main()
