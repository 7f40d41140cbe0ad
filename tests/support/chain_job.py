"""A chain of stateful steps on the switch, run as its own process so a test can kill it:

    python -m tests.support.chain_job <inputs> <checkpoint> <outputs>

Three stateful operators in one query: transformWithStateInPandas (RelayWithCloser,
eventTimeColumnName "at"), then dropDuplicates of its rows, then groupBy(window).agg(count,
sum), append mode, trigger availableNow over every input file.
Each batch's rows go to <outputs>/batch-<id>.json (written again when a batch is replayed,
so the directory ends up with exactly the committed batches' rows). Prints "DONE" at the end.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pyspark_dstl
from tests.support.chain_compare import INPUT_SCHEMA, WATERMARK_DELAY
from tests.support.chain_processors import RELAY_SCHEMA, RelayWithCloser
from tests.support.spark import build_session


def main(argv: list[str]) -> None:
    from pyspark.sql import functions as F

    inputs, checkpoint, outputs = argv[:3]
    spark = build_session(master="local[2]", app_name="chain-job",
                          extra={"spark.sql.shuffle.partitions": "2",
                                 "spark.dstl.query.logProgress": "false"})
    pyspark_dstl.install()
    source = (spark.readStream.format("json").schema(INPUT_SCHEMA)
              .option("maxFilesPerTrigger", 1).load(inputs)
              .withWatermark("ts", WATERMARK_DELAY))
    first = source.groupBy("k").transformWithStateInPandas(
        RelayWithCloser(), RELAY_SCHEMA, "Append", "EventTime", eventTimeColumnName="at")
    counts = (first.dropDuplicates(["k", "at", "tag"])
              .groupBy(F.window("at", "10 seconds"))
              .agg(F.count("*").alias("rows"), F.sum("v").alias("total")))

    def keep(frame: Any, batch_id: int) -> None:
        rows = sorted(json.dumps(row.asDict(recursive=True), default=str, sort_keys=True)
                      for row in frame.collect())
        path = os.path.join(outputs, f"batch-{batch_id}.json")
        with open(path + ".tmp", "w") as out:
            json.dump(rows, out)
        os.replace(path + ".tmp", path)

    os.makedirs(outputs, exist_ok=True)
    query = (counts.writeStream.outputMode("append").foreachBatch(keep)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
