"""A custom sink that uses the async changelog writer as its write-ahead log (exactly once).

The sink acknowledges a micro-batch as soon as its rows are durable in the changelog (one
batched, create-only upload) and applies them to SQLite in the background, in one transaction
that also records the batch id. After a crash, the rows that were acknowledged but not applied
are read back from the log and applied; a batch the engine replays is recognised by its id and
skipped. So every batch lands in SQLite exactly once, however the job dies.

The demo runs a keyed count over a few files, "crashes" the applier half-way (the engine goes
on and commits), starts a fresh sink that recovers from the log, replays the last batch as a
restarted driver would, and checks SQLite against a pandas model.

    python examples/wal_sink.py
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pandas as pd
from main_job import local_session

from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.files import read_file_log
from pyspark_dstl.spark import StatefulProcessor, StatefulProcessorHandle, stateful

WAL_DIR = "wal"
LOG_ID = "sqlite-sink"


class WalSink:
    """foreachBatch sink: WAL first (then the batch is acknowledged), SQLite second."""

    def __init__(self, wal_url: str, db_path: Path, stop_applying_after: int | None = None,
                 ) -> None:
        self.storage = ChangelogService(wal_url, ChangelogSettings())
        self.db = sqlite3.connect(db_path, check_same_thread=False)
        self.db.executescript(
            "CREATE TABLE IF NOT EXISTS counts (batch_id INTEGER, user TEXT, count INTEGER, "
            "PRIMARY KEY (batch_id, user));"
            "CREATE TABLE IF NOT EXISTS applied (batch_id INTEGER PRIMARY KEY);")
        self.stop_applying_after = stop_applying_after  # the demo's simulated crash
        self.recovered = self.recover()
        self.writer = self.storage.create_writer(LOG_ID, directory=WAL_DIR)
        self._queue: queue.Queue[tuple[int, list[list[Any]], int] | None] = queue.Queue()
        self._applier = threading.Thread(target=self._apply_loop, name="wal-applier",
                                         daemon=True)
        self._applier.start()

    def last_applied(self) -> int:
        row = self.db.execute("SELECT MAX(batch_id) FROM applied").fetchone()
        return -1 if row[0] is None else int(row[0])

    def __call__(self, df: Any, batch_id: int) -> None:
        if batch_id <= self.last_applied():
            return  # the engine replays a batch that is already in SQLite
        rows = [[row["user"], row["count"]] for row in df.collect()]
        from_sqn = self.writer.next_sqn()
        self.writer.append(0, msgpack.packb({"batch_id": batch_id, "rows": rows}))
        self.writer.persist(from_sqn).result()  # durable: the batch may be acknowledged
        self._queue.put((batch_id, rows, self.writer.next_sqn()))

    def _apply_loop(self) -> None:
        while (item := self._queue.get()) is not None:
            batch_id, rows, applied_up_to = item
            if self.stop_applying_after is not None and batch_id > self.stop_applying_after:
                continue  # "crashed": acknowledged in the log, never applied here
            self._apply(batch_id, rows)
            self.storage.delete_many(self.writer.truncate(applied_up_to))

    def _apply(self, batch_id: int, rows: list[list[Any]]) -> None:
        with self.db:  # one transaction: the rows and the batch id, or nothing
            if self.db.execute("SELECT 1 FROM applied WHERE batch_id = ?",
                               (batch_id,)).fetchone():
                return
            self.db.executemany("INSERT INTO counts VALUES (?, ?, ?)",
                                [(batch_id, user, count) for user, count in rows])
            self.db.execute("INSERT INTO applied VALUES (?)", (batch_id,))

    def recover(self) -> list[int]:
        """Apply what earlier sinks logged but did not apply; then drop their log files."""
        done = self.last_applied()
        logged: dict[int, list[list[Any]]] = {}
        files = self.storage.list(WAL_DIR + "/")
        for info in files:
            for _, change_set in read_file_log(self.storage, info.path, LOG_ID).located:
                for _, payload in change_set.entries:
                    record = msgpack.unpackb(payload)
                    logged.setdefault(record["batch_id"], record["rows"])
        recovered = sorted(b for b in logged if b > done)
        for batch_id in recovered:
            self._apply(batch_id, logged[batch_id])
        self.storage.delete_many([info.path for info in files])
        return recovered

    def close(self) -> None:
        self._queue.put(None)
        self._applier.join()
        self.writer.close()
        self.storage.close()
        self.db.close()

    def crash(self) -> None:
        """Stop applying and go, leaving the log as a killed process would."""
        self._queue.put(None)
        self._applier.join()
        self.storage.close()
        self.db.close()


class Count(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count")

    def handle_input_rows(self, key: tuple[Any, ...],
                          rows: Iterator[pd.DataFrame]) -> Iterator[tuple[Any, ...]]:
        total = self.count.get(0) + sum(len(frame) for frame in rows)
        self.count.update(total)
        yield (key[0], total)


def run_query(spark: Any, inputs: Path, checkpoint: Path, sink: WalSink) -> None:
    stream = (stateful(spark.readStream.schema("user string").option("maxFilesPerTrigger", 1)
                       .parquet(str(inputs)))
              .group_by("user").process(Count(), "user string, count long",
                                        checkpoint_location=str(checkpoint), partitions=2)
              .foreach_batch(sink))
    stream.start(trigger={"availableNow": True}).awaitTermination()


def write_inputs(directory: Path, start: int, count: int) -> list[pd.DataFrame]:
    directory.mkdir(parents=True, exist_ok=True)
    frames = [pd.DataFrame({"user": [f"user-{(i * 7 + j) % 50}" for j in range(300)]})
              for i in range(start, start + count)]
    first_stamp = time.time() - 3600
    for offset, frame in enumerate(frames):
        path = directory / f"in-{start + offset:04d}.parquet"
        frame.to_parquet(path, index=False)
        # Spark takes files in modification-time order (ties in arbitrary order): one second each
        stamp = first_stamp + start + offset
        os.utime(path, (stamp, stamp))
    return frames


def final_counts(db_path: Path) -> dict[str, int]:
    with sqlite3.connect(db_path) as db:
        rows = db.execute("SELECT user, count FROM counts c WHERE batch_id = (SELECT "
                          "MAX(batch_id) FROM counts WHERE user = c.user)").fetchall()
    return {user: count for user, count in rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work-dir", default=str(Path(__file__).resolve().parent / "out" / "wal"))
    work = Path(p.parse_args().work_dir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    wal_url, db_path = (work / "wal-root").as_uri(), work / "sink.sqlite"
    spark = local_session("pyspark-dstl-wal-sink", 2)
    frames = write_inputs(work / "input", 0, 6)

    sink = WalSink(wal_url, db_path, stop_applying_after=2)
    run_query(spark, work / "input", work / "checkpoint", sink)
    sink.crash()
    with sqlite3.connect(db_path) as db:
        last = db.execute("SELECT MAX(batch_id) FROM applied").fetchone()[0]
    print(f"run 1: the engine committed batches 0-5; SQLite got batches up to {last} before "
          f"the sink 'crashed'")

    sink = WalSink(wal_url, db_path)
    print(f"restart: recovered batches {sink.recovered} from the write-ahead log")
    engine_commits = work / "checkpoint" / "engine" / "commits"
    for name in ("5", ".5.crc"):  # as if the driver died before the engine's commit of 5
        (engine_commits / name).unlink(missing_ok=True)
    frames += write_inputs(work / "input", 6, 2)
    run_query(spark, work / "input", work / "checkpoint", sink)  # replays 5, then 6 and 7
    sink.close()

    with sqlite3.connect(db_path) as db:
        applied = [b for (b,) in db.execute("SELECT batch_id FROM applied ORDER BY 1")]
    model = pd.concat(frames).groupby("user").size().to_dict()
    exact = final_counts(db_path) == model and applied == list(range(8))
    print(f"SQLite: batches {applied} applied once each; counts "
          f"{'equal' if exact else 'DIFFER from'} the pandas model")
    spark.stop()
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
