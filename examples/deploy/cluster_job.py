"""A small job for a cluster: a keyed running count over CSV files, state on this backend.

Submitted by examples/deploy/run_standalone.sh (see docs/deploying.md) with the packed
environment on the executors; prints one line per committed batch and the state at the end.

    spark-submit ... examples/deploy/cluster_job.py <input-dir> <checkpoint> [--partitions N]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession

from pyspark_dstl import StatefulProcessor, read_state, stateful
from pyspark_dstl.spark import StatefulProcessorHandle


class RunningCount(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count")

    def handle_input_rows(self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame]) -> Any:
        total = self.count.get(0) + sum(len(frame) for frame in rows)
        self.count.update(total)
        yield (key[0], total)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("inputs")
    parser.add_argument("checkpoint")
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    spark = SparkSession.builder.appName("dstl-cluster-job").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    events = (spark.readStream.schema("user string, page string").option("maxFilesPerTrigger", 1)
              .csv(args.inputs))
    query = (stateful(events).group_by("user")
             .process(RunningCount(), "user string, count long",
                      checkpoint_location=args.checkpoint,
                      partitions=args.partitions)
             .on_progress(lambda p: print(f"committed batch {p.batch_id}: {p.output_rows} "
                                          f"row(s) out", flush=True))
             .start(trigger={"availableNow": True}))
    query.awaitTermination()
    state = read_state(spark, args.checkpoint).where("state_variable = 'count'").collect()
    counts = {json.loads(row["key"])[0]: json.loads(row["value"]) for row in state}
    print("state " + json.dumps(dict(sorted(counts.items()))), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
