"""Run as a script by the Connect test: a PySpark transformWithStateInPandas query through a
Spark Connect client with the drop-in switch, into the memory sink and a foreachBatch sink;
prints one RESULT line of JSON. Usage: connect_dropin_client.py URL WORK_DIR."""

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

    for leftover in ("in", "ckpt", "ckpt2", "batches"):  # of an earlier attempt
        shutil.rmtree(work / leftover, ignore_errors=True)
    spark = SparkSession.builder.remote(url).getOrCreate()
    pyspark_dstl.install()
    write_inputs(work / "in", [pd.DataFrame({"user": ["a", "a", "b"], "page": list("xyz")}),
                               pd.DataFrame({"user": ["a", "c"], "page": list("xy")})])
    stream = input_stream(spark, work / "in", "user string, page string")
    counts = stream.groupBy("user").transformWithStateInPandas(
        RunningCountPandas(), "user string, count long", "Update", "None")
    shaped = counts.withColumn("twice", counts["count"] * 2)
    query = (shaped.writeStream.format("memory").queryName("connect_counts")
             .option("checkpointLocation", str(work / "ckpt")).trigger(availableNow=True)
             .start())
    query.awaitTermination()
    memory = sorted(tuple(r) for r in spark.sql("SELECT * FROM connect_counts").collect())
    batches = str(work / "batches")

    def keep(df: object, batch_id: int) -> None:
        df.write.mode("overwrite").json(f"{batches}/{batch_id}")  # type: ignore[attr-defined]

    query = (counts.writeStream.foreachBatch(keep).option("checkpointLocation",
                                                          str(work / "ckpt2"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    per_batch = {path.name: sorted(tuple(r) for r in spark.read.schema(
        "user string, count long").json(str(path)).collect())
                 for path in sorted(Path(batches).iterdir())}
    result = {"type": type(counts).__name__, "memory": memory, "batches": per_batch,
              "name": query.name, "exception": str(query.exception())}
    spark.stop()
    return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], Path(sys.argv[2])), default=str))
