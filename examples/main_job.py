"""The README's main job: sessionize a stream of page views with exact, checkpointed state.

It writes page-view files (user, page, ts) into a work directory, then runs a Structured
Streaming query that reads one file per micro-batch and keeps, per user, the open session in
a ValueState and its page counts in a MapState (both with a time to live, so idle users are
forgotten). A session closes when the user's next event comes more than --gap seconds after
the previous one; closed sessions are the query's output.

Every batch prints its results and the checkpoint statistics (commit latency, durable changelog
bytes, materialized partitions, how stores were loaded). At the end the job checks itself: the
events in closed sessions plus those in still-open sessions (read back from the checkpoint with
the "dstl-state" data source) must equal the number of input events, exactly.

    python examples/main_job.py                 # about a minute on 2 cores
    python examples/main_job.py --files 10      # shorter
    python -m pyspark_dstl inspect examples/out/main_job/checkpoint   # look at what it wrote
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pyspark_dstl.backend.spark import (
    BatchProgress,
    StatefulProcessor,
    StatefulProcessorHandle,
    read_state,
    stateful,
)

INPUT_SCHEMA = "user string, page string, ts long"
OUTPUT_SCHEMA = ("user string, session_start long, session_end long, events long, "
                 "pages long, top_page string")
PAGES = [f"/page/{i}" for i in range(40)]


class Sessionizer(StatefulProcessor):
    """Per user: the open session (ValueState) and its page counts (MapState)."""

    def __init__(self, gap_seconds: int, idle_ttl: str) -> None:
        self.gap = gap_seconds
        self.ttl = idle_ttl

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.session = handle.get_value_state("session", ttl=self.ttl)
        self.pages = handle.get_map_state("pages", ttl=self.ttl)

    def handle_input_rows(self, key: tuple[Any, ...],
                          rows: Iterator[pd.DataFrame]) -> Iterator[tuple[Any, ...]]:
        frames = list(rows)  # one frame per key here; the API allows several
        frame = frames[0] if len(frames) == 1 else pd.concat(frames)
        session = self.session.get()
        counts: dict[str, int] = dict(self.pages.iterator()) if session else {}
        for ts, page in sorted(zip(frame["ts"].tolist(), frame["page"].tolist(), strict=True)):
            if session is not None and ts - session["end"] > self.gap:
                yield _closed(key[0], session, counts)
                session, counts = None, {}
            if session is None:
                session = {"start": ts, "end": ts, "events": 0}
            session["end"] = max(session["end"], ts)
            session["events"] += 1
            counts[page] = counts.get(page, 0) + 1
        assert session is not None
        self.session.update(session)
        self.pages.clear()
        for page, count in counts.items():
            self.pages.update_value(page, count)


def _closed(user: str, session: dict[str, int], counts: dict[str, int]) -> tuple[Any, ...]:
    top = max(counts.items(), key=lambda item: (item[1], item[0]))[0]
    return (user, session["start"], session["end"], session["events"], len(counts), top)


def generate_input(directory: Path, files: int, events: int, users: int, seed: int) -> int:
    """`files` parquet files; file i holds events of minute i. Returns the number of events."""
    directory.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    first_stamp = time.time() - 3600
    weights = 1.0 / np.arange(1, users + 1) ** 0.8  # a few busy users, many quiet ones
    weights /= weights.sum()
    for i in range(files):
        user_ids = rng.choice(users, size=events, p=weights)
        frame = pd.DataFrame({
            "user": [f"user-{u:05d}" for u in user_ids],
            "page": [PAGES[p] for p in rng.integers(0, len(PAGES), events)],
            "ts": i * 60 + rng.integers(0, 60, events),
        })
        path = directory / f"views-{i:04d}.parquet"
        frame.to_parquet(path, index=False)
        # Spark takes files in modification-time order (ties in arbitrary order): one second each
        stamp = first_stamp + i
        os.utime(path, (stamp, stamp))
    return files * events


def local_session(app_name: str, partitions: int) -> Any:
    """Local mode on two cores, on loopback, with this interpreter as the Python worker.

    The examples directory goes on the workers' PYTHONPATH, so classes of these modules can
    be loaded there by name."""
    here = str(Path(__file__).resolve().parent)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([here, *[p for p in paths if p != here]])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName(app_name)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", str(partitions))
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def remote_session(url: str) -> Any:
    """A Spark Connect session (url like sc://127.0.0.1:15002). The server runs the query,
    its foreachBatch function and the Python workers; it must have pyspark-dstl installed
    and reach the input and checkpoint paths given here."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).getOrCreate()


def print_batch(progress: BatchProgress, closed: int) -> None:
    loads = ",".join(f"{kind}:{n}" for kind, n in sorted(progress.load_kinds.items()))
    print(f"batch {progress.batch_id:3d} | {progress.input_rows:6d} events -> {closed:5d} "
          f"closed sessions | batch {progress.total_seconds * 1000:6.0f} ms | commit "
          f"{progress.max_task_commit_seconds * 1000:5.1f} ms | changelog "
          f"{progress.changelog_bytes / 1024:7.1f} KiB | materialized "
          f"{progress.materialized_partitions}/{sum(progress.load_kinds.values())} | "
          f"loads {loads} | cleaned {progress.cleanup_deleted_files} files", flush=True)


def summarize(progress: list[BatchProgress], elapsed: float, events: int) -> None:
    durations = [p.total_seconds * 1000 for p in progress]
    commits = [p.max_task_commit_seconds * 1000 for p in progress]
    print(f"\n{len(progress)} batches, {events} events in {elapsed:.1f} s "
          f"({events / elapsed:,.0f} events/s including start-up)")
    print(f"batch duration ms: p50 {statistics.median(durations):.0f}, "
          f"max {max(durations):.0f}; state commit ms (slowest partition): "
          f"p50 {statistics.median(commits):.1f}, max {max(commits):.1f}")


def open_session_events(spark: Any, checkpoint: str, conf: dict[str, str]) -> int:
    state = read_state(spark, checkpoint, conf=conf).where("state_variable = 'session'").toPandas()
    return sum(json.loads(value)["events"] for value in state["value"])


def run(args: argparse.Namespace, checkpoint: str, conf: dict[str, str],
        engine_checkpoint: str | None = None) -> int:
    """Generate the input, run the query to the end, print and check; exit status."""
    work = Path(args.work_dir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    events = generate_input(work / "input", args.files, args.events, args.users, args.seed)
    spark = (remote_session(args.remote) if getattr(args, "remote", None)
             else local_session("pyspark-dstl-main-job", args.partitions))
    sink_dir = work / "sink"
    sink_dir.mkdir()

    def sink(df: Any, batch_id: int) -> None:
        # A real job would write its rows somewhere; this one writes what the check needs,
        # one file per batch id, replaced whole, so a replayed batch is counted once. (Under
        # Spark Connect this runs on the server, so it must write somewhere, not to a
        # variable of this process.)
        rows = df.collect()
        written = sink_dir / f".batch-{batch_id:06d}.tmp"
        written.write_text(json.dumps({"events": sum(row["events"] for row in rows),
                                       "sessions": len(rows)}))
        written.replace(sink_dir / f"batch-{batch_id:06d}.json")

    def closed_sessions_of(batch_id: int) -> int:
        path = sink_dir / f"batch-{batch_id:06d}.json"
        return json.loads(path.read_text())["sessions"] if path.exists() else 0

    stream = (stateful(spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
                       .parquet(str(work / "input")))
              .group_by("user")
              .process(Sessionizer(args.gap, args.idle_ttl), OUTPUT_SCHEMA,
                       checkpoint=checkpoint, partitions=args.partitions, conf=conf)
              .foreach_batch(sink)
              .on_progress(lambda p: print_batch(p, closed_sessions_of(p.batch_id))))
    print(f"input: {events} events in {args.files} files under {work / 'input'}")
    print(f"checkpoint: {checkpoint}\n")
    started = time.monotonic()
    query = stream.start(trigger={"availableNow": True}, engine_checkpoint=engine_checkpoint)
    query.awaitTermination()
    if stream.progress:
        summarize(stream.progress, time.monotonic() - started, events)
    else:  # Spark Connect: foreachBatch, hence BatchProgress, lives in the server's process
        print(f"{len(query.recentProgress)} progress reports from Spark (BatchProgress stays "
              f"on the Connect server; see docs/spark.md)")
    in_open = open_session_events(spark, checkpoint, conf)
    in_closed = sum(json.loads(p.read_text())["events"] for p in sink_dir.glob("batch-*.json"))
    total = in_closed + in_open
    print(f"events in closed sessions {in_closed} + in open sessions "
          f"{in_open} = {total} (input {events}): {'exact' if total == events else 'MISMATCH'}")
    spark.stop()
    return 0 if total == events else 1


def parser() -> argparse.ArgumentParser:
    default_dir = Path(__file__).resolve().parent / "out" / "main_job"
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work-dir", default=str(default_dir), help="wiped and refilled")
    p.add_argument("--files", type=int, default=20, help="input files = micro-batches")
    p.add_argument("--events", type=int, default=10_000, help="events per file")
    p.add_argument("--users", type=int, default=10_000)
    p.add_argument("--partitions", type=int, default=4, help="state partitions")
    p.add_argument("--gap", type=int, default=120, help="session gap, event seconds")
    p.add_argument("--idle-ttl", default="30min", help="forget users idle this long")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--remote", help="run through a Spark Connect server, e.g. "
                                    "sc://127.0.0.1:15002 (default: a local session)")
    return p


def main() -> int:
    args = parser().parse_args()
    checkpoint = str(Path(args.work_dir).resolve() / "checkpoint")
    # snapshots at the default pace (every 10 commits of a store), whichever worker commits
    conf = {"stateStore.minBatchesToRetain": "10", "query.cleanupInterval": "5"}
    return run(args, checkpoint, conf)


if __name__ == "__main__":
    sys.exit(main())
