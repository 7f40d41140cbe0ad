"""A mirror of a streaming query's state: shopping carts, mirrored into a table as they change.

The producer is PySpark's own query, moved here by `pyspark_dstl.install()`: per user, a cart
(a MapState item -> quantity) that cart events add to and take from, and that a checkout
empties. A second streaming query reads the producer's changes as a stream
(`readStream.format("dstl-changes")`) and appends them to a parquet table through Spark's file
sink, exactly once. The mirror is a view of that table: per (user, item), the newest change,
unless it is a delete. Both queries run side by side; after every producer batch, once the
mirror has caught up, the job checks that the mirror equals the producer's state as Spark's
`statestore` source shows it, and prints how long the changes took to arrive.

    python examples/state_mirror.py                 # about a minute on 2 cores
    python examples/state_mirror.py --files 3       # shorter
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from main_job import local_session
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

import pyspark_dstl

EVENTS = "user string, item string, quantity long"
CARTS = "user string, items long, quantity long"
CHECKOUT = "checkout"
MIRROR = """
    SELECT key.user AS user, user_map_key.item AS item, user_map_value.quantity AS quantity
    FROM (SELECT *, row_number() OVER (PARTITION BY key, user_map_key
                                       ORDER BY batch_id DESC) AS newest
          FROM cart_changes)
    WHERE newest = 1 AND change_type = 'update'
"""


class Carts(StatefulProcessor):
    """Per user: item -> quantity. A positive quantity adds, a negative one takes away (the
    item goes at zero), the item "checkout" empties the cart."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.cart = handle.getMapState("cart", "item string", "quantity long")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        events = pd.concat(list(rows))
        for item, quantity in zip(events["item"], events["quantity"], strict=True):
            if item == CHECKOUT:
                self.cart.clear()
                continue
            held = self.cart.getValue((item,))
            left = (held[0] if held else 0) + int(quantity)
            if left > 0:
                self.cart.updateValue((item,), (left,))
            elif held:
                self.cart.removeKey((item,))
        entries = [value[0] for value in self.cart.values()] if self.cart.exists() else []
        yield pd.DataFrame({"user": [key[0]], "items": [len(entries)],
                            "quantity": [sum(entries)]})

    def close(self) -> None:
        pass


def write_events(directory: Path, index: int, count: int, rng: np.random.Generator) -> None:
    users = [f"u{n:02d}" for n in rng.integers(0, 25, count)]
    items = [CHECKOUT if r < 0.04 else f"item-{n}"
             for r, n in zip(rng.random(count), rng.integers(0, 12, count), strict=True)]
    quantity = rng.choice([-2, -1, 1, 1, 2, 3], count)
    frame = pd.DataFrame({"user": users, "item": items, "quantity": quantity.astype("int64")})
    temporary = directory / f".part-{index:05d}.parquet"
    frame.to_parquet(temporary, index=False)
    temporary.rename(directory / f"part-{index:05d}.parquet")  # appears whole


def wait_for(condition: Any, what: str, timeout: float = 300.0) -> float:
    """Seconds waited until `condition()` held."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"waited {timeout} s for {what}")
        time.sleep(0.1)
    return time.monotonic() - started


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", default="/tmp/dstl-state-mirror")
    parser.add_argument("--files", type=int, default=6)
    parser.add_argument("--events", type=int, default=400)
    args = parser.parse_args(argv)
    work = Path(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    (work / "events").mkdir(parents=True)
    location, changes = str(work / "carts"), str(work / "cart_changes")
    rng = np.random.default_rng(7)

    spark = local_session("state-mirror", partitions=3)
    pyspark_dstl.install()  # the one added line: the producer runs on pyspark-dstl
    carts = (spark.readStream.schema(EVENTS).option("maxFilesPerTrigger", 1)
             .parquet(str(work / "events")).groupBy("user")
             .transformWithStateInPandas(Carts(), CARTS, "Update", "None"))
    write_events(work / "events", 0, args.events, rng)
    producer = (carts.writeStream.foreachBatch(lambda df, batch_id: None)
                .option("checkpointLocation", location).trigger(processingTime="1 second")
                .start())

    def produced() -> int:
        """The producer's newest committed batch, as Spark's state-metadata source shows it
        (-1 before the first)."""
        if not (Path(location) / "commits").is_dir():
            return -1
        rows = spark.read.format("state-metadata").load(location).collect()
        return int(rows[0]["maxBatchId"]) if rows else -1

    wait_for(lambda: produced() >= 0, "the producer's first batch")
    mirror = (spark.readStream.format("dstl-changes").option("stateVarName", "cart")
              .option("feedName", "mirror").load(location)
              .writeStream.format("parquet").option("checkpointLocation", str(work / "feed"))
              .trigger(processingTime="1 second").start(changes))

    def mirrored() -> int:
        """How many producer batches the mirror holds: the feed's offset after the newest
        consumer batch Spark reported done (its files are in the table by then)."""
        progress = mirror.lastProgress
        if progress is None or not progress["sources"]:
            return 0
        return int(json.loads(progress["sources"][0]["endOffset"] or '{"batch": 0}')["batch"])

    failures = 0
    for index in range(1, args.files + 1):
        batch = produced()
        lag = wait_for(lambda b=batch: mirrored() > b, f"the mirror of batch {batch}")
        spark.read.parquet(changes).createOrReplaceTempView("cart_changes")
        view = {(r["user"], r["item"]): r["quantity"] for r in spark.sql(MIRROR).collect()}
        state = spark.read.format("statestore").option("stateVarName", "cart") \
            .option("batchId", batch).load(location)
        truth = {(r["key"]["user"], r["user_map_key"]["item"]): r["user_map_value"]["quantity"]
                 for r in state.collect()}
        same = view == truth
        failures += not same
        print(f"{'ok' if same else 'MISMATCH'} batch {batch}: mirror of {len(view)} cart "
              f"entries equals the state reader's view; changes arrived {lag:.1f} s after "
              f"the batch was seen committed", flush=True)
        if index <= args.files - 1:
            write_events(work / "events", index, args.events, rng)
            wait_for(lambda b=batch: produced() > b, f"producer batch {batch + 1}")
    producer.stop()
    mirror.stop()
    spark.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
