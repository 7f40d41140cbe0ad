"""Rescale benchmark: a rescale's time and bytes against a full restore of the same state.

A checkpoint of `keys` keys (one bigint grouping key each, as backend.spark stores them: a
msgpack key in a value state, 100 random bytes per value) is written over `from` partitions,
every key where Spark's hash puts it, each store one snapshot. Then, alternating in every
round, from cold local directories:
- restore: every partition's store loaded at its checkpoint, two at a time (what a restart of
  the query reads);
- rescale: `python -m pyspark_dstl rescale`'s work, to `to` partitions: every old store
  restored (two at a time, ahead of the reading), every key routed by Spark's hash (in numpy)
  and ingested into its new store, each new store committed as a snapshot (four uploading at
  once). The commit log entry (one small file) is left
  out of both.
Bytes: what each reads from the checkpoint (snapshot files) and what the rescale writes. On S3
the proxy's byte counts are recorded too, and requests get the recovery benchmark's latency.

Beside them (file only, unless --no-spark): Spark's own offline repartition
(`StreamingCheckpointManager.repartition`, Spark 4.2+, reached in PySpark 4.3 as
`spark._streamingCheckpointManager`) of an equal Spark checkpoint: a stopped streaming
`groupBy(k).agg(max(v))` over the same number of keys with 100-character values, RocksDB state
store provider, `from` shuffle partitions, local[2]; each round repartitions it to `to` and
back.

    python -m benchmarks.rescale [--quick] [--storage file,s3] [--keys 1000000] [--no-spark]
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
from pyspark_dstl.backend.lineage.checkpoint import CheckpointInfo
from pyspark_dstl.backend.ops.rescale import PARALLEL_LOADS, rescale_stores, restore_bytes
from pyspark_dstl.backend.spark.codec.key_routing import KeyRouter
from pyspark_dstl.backend.spark.codec.spark_hash import hash_longs
from pyspark_dstl.backend.spark.codec.values import pack_key
from pyspark_dstl.backend.store.provider import ChangelogProvider
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.changelog.options import ChangelogOptions
from pyspark_dstl.materializer.options import MaterializerOptions

NAME = "rescale"
FULL: dict[str, Any] = {"keys": 1_000_000, "from": 4, "to": 6, "rounds": 3}
QUICK: dict[str, Any] = {"keys": 20_000, "from": 3, "to": 5, "rounds": 1}
OPERATOR = "stateful"
CF = "value/state"
VALUE_SIZE = 100
CHUNK = 200_000
NO_SNAPSHOTS = MaterializerOptions(interval=None, every_n_commits=None,
                                   backstop_bytes=1 << 50)


@dataclass
class Target:
    kind: str
    url: str
    options: ChangelogOptions
    s3: S3Harness | None = None


Layout = Callable[[np.ndarray, int], tuple[np.ndarray, list[bytes]]]
"""(key numbers, partitions) -> each key's partition and its stored key."""


def spark_layout(numbers: np.ndarray, partitions: int) -> tuple[np.ndarray, list[bytes]]:
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
          layout: Layout = spark_layout) -> dict[int, CheckpointInfo]:
    """One snapshot per partition holding its keys (where `layout` puts them)."""
    options = backend_options(work, target.options, NO_SNAPSHOTS)
    with StateBackend(options) as backend:
        stores = []
        for partition in range(partitions):
            provider = backend.provider(target.url, OPERATOR, partition)
            assert isinstance(provider, ChangelogProvider)
            stores.append(provider.get_empty_store_after(0))
        for numbers, blob in generated(keys, seed):
            owners, encoded = layout(numbers, partitions)
            values = [blob[i * VALUE_SIZE:(i + 1) * VALUE_SIZE] for i in range(len(numbers))]
            for partition, store in enumerate(stores):
                chosen = np.flatnonzero(owners == partition)
                store.ingest(CF, [encoded[i] for i in chosen], [values[i] for i in chosen])
        return {p: store.commit(materialize=True) for p, store in enumerate(stores)}


def restore_all(target: Target, infos: dict[int, CheckpointInfo], work: Path,
                ) -> dict[str, Any]:
    """Every store loaded at its checkpoint in a fresh backend (cold local directory), as
    many at once as the rescale restores its old stores."""
    options = backend_options(work, target.options, NO_SNAPSHOTS)
    began = time.perf_counter()
    with StateBackend(options) as backend:

        def load(item: tuple[int, CheckpointInfo]) -> int:
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


def rescale_all(target: Target, infos: dict[int, CheckpointInfo], partitions: int,
                work: Path) -> dict[str, Any]:
    options = backend_options(work, target.options, NO_SNAPSHOTS)
    began = time.perf_counter()
    _, stats = rescale_stores(options, target.url, OPERATOR, infos, partitions,
                              KeyRouter(["bigint"], partitions))
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
    print(f"  {target.kind}: built {plan['keys']:,} keys over {plan['from']} partitions in "
          f"{time.perf_counter() - began:.1f} s", flush=True)
    results: dict[str, list[dict[str, Any]]] = {"restore": [], "rescale": []}
    for number in range(plan["rounds"]):
        order = ["restore", "rescale"] if number % 2 == 0 else ["rescale", "restore"]
        for label in order:
            with scratch(args, label) as local:
                if label == "restore":
                    results[label].append(measured_on_wire(
                        target, lambda local=local: restore_all(target, infos, local)))
                else:
                    results[label].append(measured_on_wire(
                        target, lambda local=local: rescale_all(target, infos, plan["to"],
                                                                local)))
        print(f"  {target.kind}: round {number + 1}/{plan['rounds']}: restore "
              f"{results['restore'][-1]['seconds']:.2f} s, rescale "
              f"{results['rescale'][-1]['seconds']:.2f} s", flush=True)
    return results


ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def run_spark(args: argparse.Namespace, plan: dict[str, Any], work: Path,
              ) -> list[dict[str, Any]]:
    """Spark's offline repartition of an equal Spark checkpoint, `from` -> `to` and back."""
    import pandas as pd
    from pyspark.sql import functions as F

    from tests.support.spark import build_session

    spark = build_session(master="local[2]", app_name="pyspark-dstl-bench-rescale", extra={
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
            timed = {"state_bytes": state_bytes}
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


def tabulate(report: Report, kind: str, results: dict[str, list[dict[str, Any]]],
             plan: dict[str, Any]) -> None:
    restore = summarize([r["seconds"] for r in results["restore"]])
    rescale = summarize([r["seconds"] for r in results["rescale"]])
    first_restore, first_rescale = results["restore"][0], results["rescale"][0]
    rows = [["restore (all partitions)", restore["n"], restore["p50"], restore["min"],
             restore["max"], first_restore["bytes_read"] / 1e6, 0.0,
             (first_restore.get("wire_bytes_out", 0) +
              first_restore.get("wire_bytes_in", 0)) / 1e6, 1.0],
            [f"rescale {plan['from']} -> {plan['to']}", rescale["n"], rescale["p50"],
             rescale["min"], rescale["max"], first_rescale["bytes_read"] / 1e6,
             first_rescale["bytes_written"] / 1e6,
             first_rescale.get("wire_bytes_out", 0) / 1e6 +
             first_rescale.get("wire_bytes_in", 0) / 1e6,
             ratio(rescale["p50"], restore["p50"])]]
    report.table(f"Rescale vs restore on {kind}:// of {plan['keys']:,} keys",
                 ["operation", "n", "p50 s", "min s", "max s", "read MB", "written MB",
                  "on the wire MB (S3)", "time vs restore"], rows)
    phases = [[name, summarize([r[f"{name}_seconds"] for r in results["rescale"]])["p50"]]
              for name in ("load", "read", "write")]
    report.table(f"Rescale phases on {kind}:// (p50 s): load = restore the old stores (summed "
                 f"over {PARALLEL_LOADS} at once, overlapping the reads); read = iterate, route "
                 f"and ingest their keys; write = snapshot and upload the new stores",
                 ["phase", "p50 s"], phases)
    value = ratio(rescale["p50"], restore["p50"])
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
    ])
    plan = plan_of(args, QUICK, FULL, ("keys", "rounds"))
    kinds = [k.strip() for k in args.storage.split(",") if k.strip()]
    report = Report(NAME, args, {**plan, "storage": kinds, "value_bytes": VALUE_SIZE,
                                 "key": "one bigint grouping key",
                                 "s3_latency_model": S3_LATENCY.to_dict(),
                                 "s3_latency_model_text": S3_LATENCY.describe()})
    report.note("read MB: snapshot and changelog bytes of the checkpoints loaded; written MB: "
                "snapshot bytes the rescale uploads; on the wire: both directions at the S3 "
                "proxy, requests included")
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
                    target = Target("file", file_url(work / "remote"), ChangelogOptions())
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
