"""The change feed: what reading a batch's state changes costs, and how soon a stream has them.

(1) Cost per changed key, batch read. The same keyed running count (a value state per user)
runs on PySpark's own operator (RocksDB, changelog checkpointing on) and with the switch, one
file per batch; then each engine's change feed (`readChangeFeed`, all batches) is read into
Spark's `noop` sink. Time per changed key, best of `--rounds`, side by side, and for scale the
same for a `statestore` read of the newest batch's state (per key shown).

(2) Lag, stream. The switched query runs with a processing-time trigger while a second query
reads its changes as a stream (`dstl-changes`, processing-time trigger `--consumer-trigger`)
into a foreachBatch sink that notes when each producer batch's rows arrive. Lag of a batch =
arrival - the time it became final (Spark's engine commit of the producer, `commits/<batch>`
under its engine checkpoint), and arrival - its commit entry here.

    python -m benchmarks.change_feed [--quick] [--keys 50000] [--files 8] [--rows 25000]
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.harness import Report, parse_args, plan_of, ratio, scratch, summarize
from benchmarks.spark_jobs import OUTPUT_SCHEMA, TwsCount

NAME = "change_feed"
SPARK_STATE_CONF = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}
FULL = {"keys": 50_000, "files": 8, "rows": 25_000, "partitions": 4, "rounds": 3,
        "stream_files": 10, "stream_rows": 10_000, "producer_trigger": "2 seconds"}
QUICK = {"keys": 5_000, "files": 3, "rows": 5_000, "partitions": 2, "rounds": 1,
         "stream_files": 3, "stream_rows": 2_000, "producer_trigger": "2 seconds"}


def write_files(directory: Path, count: int, rows: int, keys: int, seed: int,
                start: int = 0) -> None:
    rng = np.random.default_rng(seed + start)
    directory.mkdir(parents=True, exist_ok=True)
    base = time.time() - 3600
    for index in range(start, start + count):
        frame = pd.DataFrame({"user": [f"user-{u}" for u in rng.integers(0, keys, rows)],
                              "v": np.arange(rows, dtype=np.int64)})
        temporary = directory / f".part-{index:05d}.parquet"
        frame.to_parquet(temporary, index=False)
        os.utime(temporary, (base + index, base + index))
        temporary.rename(directory / f"part-{index:05d}.parquet")


def counts(spark: Any, inputs: Path) -> Any:
    return (spark.readStream.schema("user string, v long").option("maxFilesPerTrigger", 1)
            .parquet(str(inputs)).groupBy("user")
            .transformWithStateInPandas(TwsCount(), OUTPUT_SCHEMA, "Update", "None"))


def run_query(spark: Any, inputs: Path, location: Path, switched: bool) -> None:
    import pyspark_dstl

    if switched:
        pyspark_dstl.install()
    try:
        query = (counts(spark, inputs).writeStream.format("noop").outputMode("update")
                 .option("checkpointLocation", str(location)).trigger(availableNow=True)
                 .start())
        query.awaitTermination()
    finally:
        if switched:
            pyspark_dstl.uninstall()


def timed_read(spark: Any, location: Path, rounds: int, **options: Any) -> tuple[float, int]:
    """(best seconds to read everything into the noop sink, rows read)."""
    def frame() -> Any:
        reader = spark.read.format("statestore").option("stateVarName", "count")
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load(str(location))

    rows = frame().count()
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        frame().write.format("noop").mode("overwrite").save()
        best = min(best, time.perf_counter() - started)
    return best, rows


def cost(report: Report, spark: Any, plan: dict[str, Any], work: Path, seed: int) -> None:
    import pyspark_dstl

    write_files(work / "in", plan["files"], plan["rows"], plan["keys"], seed)
    for engine, switched in (("pyspark", False), ("dropin", True)):
        run_query(spark, work / "in", work / engine, switched)
    pyspark_dstl.install()  # statestore reads of the switched location come here
    measured: dict[str, dict[str, tuple[float, int]]] = {}
    try:
        for engine in ("pyspark", "dropin"):
            measured[engine] = {
                "change feed": timed_read(spark, work / engine, plan["rounds"],
                                          readChangeFeed="true", changeStartBatchId=0),
                "state": timed_read(spark, work / engine, plan["rounds"])}
    finally:
        pyspark_dstl.uninstall()
    rows = []
    for read in ("change feed", "state"):
        spark_s, spark_rows = measured["pyspark"][read]
        ours_s, ours_rows = measured["dropin"][read]
        rows.append([read, spark_rows, spark_s, spark_s / spark_rows * 1e6, ours_rows, ours_s,
                     ours_s / ours_rows * 1e6, ratio(ours_s / ours_rows, spark_s / spark_rows)])
    report.table(f"(1) Reading {plan['files']} batches of {plan['rows']:,} rows over "
                 f"{plan['keys']:,} keys: best of {plan['rounds']}, into the noop sink",
                 ["read", "Spark rows", "Spark s", "Spark us/row", "here rows", "here s",
                  "here us/row", "here/Spark per row"], rows)
    report.put("cost", {engine: {read: list(value) for read, value in reads.items()}
                        for engine, reads in measured.items()})


def lag(report: Report, spark: Any, plan: dict[str, Any], work: Path, seed: int,
        consumer_trigger: str) -> None:
    import pyspark_dstl
    from pyspark_dstl.backend.lineage.commit_log import CommitLog
    from pyspark_dstl.changelog.changelog_service import ChangelogService

    inputs, location = work / "stream-in", work / "stream"
    write_files(inputs, 1, plan["stream_rows"], plan["keys"], seed)
    arrivals: dict[int, float] = {}
    changed: dict[int, int] = {}

    def note(df: Any, batch_id: int) -> None:
        now = time.time()
        for row in df.groupBy("batch_id").count().collect():
            arrivals.setdefault(int(row["batch_id"]), now)
            changed[int(row["batch_id"])] = int(row["count"])

    pyspark_dstl.install()
    try:
        producer = (counts(spark, inputs).writeStream.foreachBatch(lambda df, batch_id: None)
                    .option("checkpointLocation", str(location))
                    .trigger(processingTime=plan["producer_trigger"]).start())
        while not (location / "commits" / "0.0").exists():
            time.sleep(0.05)
        consumer = (spark.readStream.format("dstl-changes").option("stateVarName", "count")
                    .option("feedName", "bench").load(str(location))
                    .writeStream.foreachBatch(note).option("checkpointLocation",
                                                           str(work / "feed"))
                    .trigger(processingTime=consumer_trigger).start())
        feeder = threading.Thread(target=write_files, args=(
            inputs, plan["stream_files"] - 1, plan["stream_rows"], plan["keys"], seed, 1))
        feeder.start()
        feeder.join()
        last = plan["stream_files"] - 1
        deadline = time.monotonic() + 600
        while last not in arrivals and time.monotonic() < deadline:
            time.sleep(0.1)
        consumer.stop()
        producer.stop()
    finally:
        pyspark_dstl.uninstall()
    with ChangelogService(location.as_uri()) as storage:
        log = CommitLog(storage)
        entries = {batch: log.read(batch).created_ms / 1000 for batch in log.batch_ids()}
    engine = {int(p.name): p.stat().st_mtime for p in (location / "engine" / "commits").iterdir()
              if p.name.isdigit()}
    final = [arrivals[b] - engine[b] for b in sorted(arrivals) if b in engine]
    committed = [arrivals[b] - entries[b] for b in sorted(arrivals) if b in entries]
    stats = [("from the engine's commit (final)", summarize(final)),
             ("from the commit entry", summarize(committed))]
    report.table(f"(2) Stream lag over {len(arrivals)} producer batches (producer trigger "
                 f"{plan['producer_trigger']}, consumer trigger {consumer_trigger}, "
                 f"{plan['stream_rows']:,} rows per batch, "
                 f"{int(np.mean(list(changed.values()) or [0])):,} changed keys per batch)",
                 ["lag", "n", "p50 s", "p90 s", "max s"],
                 [[name, s.get("n", 0), s.get("p50"), s.get("p90"), s.get("max")]
                  for name, s in stats])
    report.put("lag", {"final": final, "committed": committed, "changed": changed})


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__ or NAME, argv, [
        (["--keys"], {"type": int, "default": None}),
        (["--files"], {"type": int, "default": None}),
        (["--rows"], {"type": int, "default": None}),
        (["--consumer-trigger"], {"default": "0 seconds",
                                  "help": "the stream consumer's processing-time trigger"}),
    ])
    plan = plan_of(args, QUICK, FULL, ("keys", "files", "rows"))
    from tests.support.spark import build_session

    report = Report(NAME, args, {**plan, "master": "local[2]",
                                 "consumer_trigger": args.consumer_trigger,
                                 "spark_state_conf": SPARK_STATE_CONF})
    with scratch(args, "change-feed") as work:
        spark = build_session(master="local[2]", app_name="pyspark-dstl-bench",
                              spark_defaults=True,
                              extra={**SPARK_STATE_CONF, "spark.dstl.query.logProgress": "false",
                                     "spark.sql.shuffle.partitions": str(plan["partitions"])})
        try:
            cost(report, spark, plan, work, args.seed)
            lag(report, spark, plan, work, args.seed, args.consumer_trigger)
        finally:
            spark.stop()
    report.save()


if __name__ == "__main__":
    main()
