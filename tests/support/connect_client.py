"""Run as a script by the Connect test: a stateful query and the state reader through a Spark
Connect client; prints one RESULT line of JSON. Usage: connect_client.py URL WORK_DIR."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def main(url: str, work: Path) -> dict[str, object]:
    from pyspark.sql import SparkSession

    from pyspark_dstl.spark import observed_state_metrics, read_state, stateful
    from tests.support.spark import (
        COUNT_SCHEMA,
        CountProcessor,
        count_model,
        file_stream,
        make_batches,
        write_batches,
    )

    for leftover in ("in", "ckpt"):  # of an earlier attempt
        shutil.rmtree(work / leftover, ignore_errors=True)
    spark = SparkSession.builder.remote(url).getOrCreate()
    frames = make_batches(3, rows=60, keys=12, seed=61)
    write_batches(work / "in", frames)
    stream = (stateful(file_stream(spark, work / "in")).group_by("user")
              .process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=str(work / "ckpt"),
                       partitions=2))
    query = stream.start(trigger={"availableNow": True})
    query.awaitTermination()
    observed = {p.batchId: observed_state_metrics(p) for p in query.recentProgress
                if p.numInputRows > 0}
    state = read_state(spark, str(work / "ckpt")).toPandas()
    state = state[state["state_variable"] == "count"]
    counts = {json.loads(k)[0]: json.loads(v)
              for k, v in zip(state["key"], state["value"], strict=True)}
    by_name = spark.read.format("dstl-state").load(str(work / "ckpt")).count()
    spark.stop()
    return {"counts_match": counts == count_model(frames), "by_name_rows": by_name,
            "observed": {str(k): v for k, v in observed.items()},
            "client_progress": len(stream.progress)}


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], Path(sys.argv[2])), default=str))
