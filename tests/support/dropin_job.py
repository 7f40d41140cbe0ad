"""A PySpark query with the drop-in switch, run as its own process so a test can kill it.

    python -m tests.support.dropin_job <inputs> <checkpoint> <output> [format]

A running count per user over the parquet files of <inputs> (one file per batch), written to
<output> with Spark's writeStream.format(...).start(path), trigger availableNow. Prints
"DONE <batches>" when the query ends.
"""

from __future__ import annotations

import sys

import pyspark_dstl
from tests.support.compat_processors import RunningCountPandas
from tests.support.compat_runs import input_stream
from tests.support.spark import build_session

USERS = "user string, page string"


def main(argv: list[str]) -> None:
    inputs, checkpoint, output = argv[:3]
    file_format = argv[3] if len(argv) > 3 else "parquet"
    spark = build_session(master="local[2]", app_name="dropin-job")
    pyspark_dstl.install()
    counts = (input_stream(spark, inputs, USERS).groupBy("user")
              .transformWithStateInPandas(RunningCountPandas(), "user string, count long",
                                          "Update", "None"))
    query = (counts.writeStream.format(file_format).outputMode("append")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True)
             .start(output))
    query.awaitTermination()
    print(f"DONE {len(query.recentProgress)}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
