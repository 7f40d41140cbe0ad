"""Run as a script by the Connect test of Spark's state sources: PySpark's own query with the
switch through a Spark Connect client, then `statestore` and `state-metadata` reads of its
checkpoint location through the same client; prints one RESULT line of JSON.
Usage: connect_state_client.py URL WORK_DIR."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def main(url: str, work: Path) -> dict[str, object]:
    import pandas as pd
    from pyspark.sql import SparkSession

    import pyspark_dstl
    from tests.support.compat_processors import RunningCountPandas
    from tests.support.compat_runs import input_stream, write_inputs

    for leftover in ("in", "ckpt"):  # of an earlier attempt
        shutil.rmtree(work / leftover, ignore_errors=True)
    spark = SparkSession.builder.remote(url).getOrCreate()
    pyspark_dstl.install()
    write_inputs(work / "in", [pd.DataFrame({"user": ["a", "a", "b"], "page": list("xyz")}),
                               pd.DataFrame({"user": ["a", "c"], "page": list("xy")})])
    counts = (input_stream(spark, work / "in", "user string, page string").groupBy("user")
              .transformWithStateInPandas(RunningCountPandas(), "user string, count long",
                                          "Update", "None"))
    query = (counts.writeStream.foreachBatch(lambda df, batch_id: None)
             .option("checkpointLocation", str(work / "ckpt")).trigger(availableNow=True)
             .start())
    query.awaitTermination()
    location = str(work / "ckpt")
    state = (spark.read.format("statestore").option("stateVarName", "count").load(location))
    changes = (spark.read.format("statestore").option("stateVarName", "count")
               .option("readChangeFeed", "true").option("changeStartBatchId", 1)
               .load(location))
    metadata = spark.read.format("state-metadata").load(location).collect()[0].asDict()
    result = {
        "state": sorted([r["key"]["user"], r["value"]["count"], r["partition_id"]]
                        for r in state.collect()),
        "schema": state.schema.simpleString(),
        "changes": sorted([r["batch_id"], r["change_type"], r["key"]["user"]]
                          for r in changes.collect()),
        "metadata": metadata,
    }
    spark.stop()
    return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], Path(sys.argv[2])), default=str))
