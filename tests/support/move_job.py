"""A move between Spark's operator and this backend, run as its own process so a test can kill it
at a kill point (DSTL_KILL_POINT).

    python -m tests.support.move_job in-place <inputs> <location> <output>
    python -m tests.support.move_job export <location> <spark-checkpoint>

`in-place`: the running count per user of tests/support/dropin_job.py (a parquet sink,
availableNow) started with the switch on a location holding Spark's own checkpoint, with
spark.dstl.query.sparkCheckpoint=migrate. `export`: export-state of such a location. Prints
"DONE" when it finished.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

USERS = "user string, page string"
COUNTS = "user string, count long"
IN_PLACE_POINTS = ("move_in_place_marked", "move_in_place_recorded", "move_in_place_committed",
                   "move_in_place_engine_copied")
EXPORT_POINTS = ("export_state_marked", "export_state_staged", "export_state_placed")
MOVE_POINTS = IN_PLACE_POINTS + EXPORT_POINTS
SETTINGS = {"spark.sql.shuffle.partitions": "2"}


def counts(spark: Any, inputs: str) -> Any:
    """The query's stateful result (PySpark's own call; the switch decides who runs it)."""
    from tests.support.compat_processors import RunningCountPandas
    from tests.support.compat_runs import input_stream

    return input_stream(spark, Path(inputs), USERS).groupBy("user").transformWithStateInPandas(
        RunningCountPandas(), COUNTS, "Update", "None")


def main(argv: list[str]) -> None:
    """pyspark is imported here: the kill point names above are read by pyspark-free tests."""
    import pyspark_dstl
    from tests.support.compat_processors import RunningCountPandas
    from tests.support.spark import build_session

    spark = build_session(master="local[2]", app_name="move-job",
                          extra={**SETTINGS, "spark.dstl.query.sparkCheckpoint": "migrate"})
    if argv[0] == "in-place":
        inputs, location, output = argv[1:4]
        pyspark_dstl.install()
        query = (counts(spark, inputs).writeStream.format("parquet")
                 .outputMode("append").option("checkpointLocation", location)
                 .trigger(availableNow=True).start(output))
        query.awaitTermination()
    else:
        location, target = argv[1:3]
        pyspark_dstl.export_state(spark, location, target, RunningCountPandas())
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
