"""The README's main job: sessionize page views in event time, with exact, checkpointed state.

It writes page-view files (user, page, ts) into a work directory, one minute of event time per
file, then runs a Structured Streaming query that reads one file per micro-batch and keeps, per
user, the open session in a ValueState and its page counts in a MapState. A session ends after
--gap seconds of inactivity in event time: an event-time timer at the session's end + gap emits
it once the watermark (the newest event time seen minus --watermark-delay) passes that point,
even if the user never sends another event. Some users go silent for good, and a few rows
arrive minutes late; rows at or before the watermark are dropped and counted, as Spark does.

Every batch prints its results, the watermark it used, the late rows it dropped, the timers it
fired and the checkpoint statistics. After the last file, one more batch without input (asked
for by the tick source) fires the timers the final watermark makes due, and the query stops by
itself (trigger availableNow; before PySpark 4.2, which runs no batch without input under
availableNow, a processingTime trigger, processAllAvailable() and stop() do the same). At
the end the job checks itself:
- no session stays open past the watermark: every open session (read back from the checkpoint
  with the "dstl-state" data source) ends less than a gap before the final watermark, and has
  its timer at end + gap;
- events in closed sessions + events in open sessions + late rows = input events, exactly;
- the late rows are exactly those the watermark rule, computed here from the files, drops.

    python examples/main_job.py                 # well under a minute on 2 cores
    python examples/main_job.py --files 5       # shorter
    python -m pyspark_dstl inspect examples/out/main_job/checkpoint   # look at what it wrote
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pyspark_dstl.spark import (
    PROGRESS_JSON_LOGGER,
    BatchProgress,
    StatefulProcessor,
    StatefulProcessorHandle,
    read_state,
    stateful,
)
from pyspark_dstl.spark.pyspark_versions import python_sources_run_available_now

INPUT_SCHEMA = "user string, page string, ts timestamp"
OUTPUT_SCHEMA = ("user string, session_start timestamp, session_end timestamp, events long, "
                 "pages long, top_page string, closed_by string")
PAGES = [f"/page/{i}" for i in range(40)]
FIRST_MINUTE_MS = 1_717_232_400_000  # 2024-06-01 09:00 UTC: event time of the first file
MINUTE_MS = 60_000


class Sessionizer(StatefulProcessor):
    """Per user: the open session (ValueState), its page counts (MapState) and one event-time
    timer at the session's end + gap, which closes it when the user goes quiet."""

    def __init__(self, gap_seconds: int) -> None:
        self.gap_ms = gap_seconds * 1000

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.session = handle.get_value_state("session")
        self.pages = handle.get_map_state("pages")

    def handle_input_rows(self, key: tuple[Any, ...],
                          rows: Iterator[pd.DataFrame]) -> Iterator[tuple[Any, ...]]:
        frames = list(rows)  # one frame per key here; the API allows several
        frame = frames[0] if len(frames) == 1 else pd.concat(frames)
        session = self.session.get()
        stored = session is not None  # the page counts in state belong to the open session
        restarted = False  # a new session began here: the stored counts are the old one's
        changed: dict[str, int] = {}  # new counts of the pages these rows visited
        old_timer = session["end"] + self.gap_ms if session else None
        stamps = frame["ts"].dt.as_unit("ms").astype("int64").tolist()  # epoch ms
        for ts, page in sorted(zip(stamps, frame["page"].tolist(), strict=True)):
            if session is not None and ts - session["end"] > self.gap_ms:
                yield _closed(key[0], session, self._counts(changed, stored), "next event")
                session, changed, stored, restarted = None, {}, False, True
            if session is None:
                session = {"start": ts, "end": ts, "events": 0}
            session["start"] = min(session["start"], ts)  # a straggler joins the session
            session["end"] = max(session["end"], ts)
            session["events"] += 1
            if page not in changed:
                changed[page] = self.pages.get_value(page, 0) if stored else 0
            changed[page] += 1
        assert session is not None
        timer = session["end"] + self.gap_ms
        if old_timer is not None and old_timer != timer:
            self.handle.delete_timer(old_timer)  # the session moved on: so does its timer
        if timer <= self.handle.watermark_ms:
            # the watermark already passed end + gap (rows just inside the late limit): a
            # timer there would never fire in order, so the session closes now
            yield _closed(key[0], session, self._counts(changed, stored), "watermark")
            self._forget()
            return
        self.handle.register_timer(timer)
        self.session.update(session)
        if restarted:
            self.pages.clear()
        for page, count in changed.items():  # write only what changed
            self.pages.update_value(page, count)

    def handle_expired_timer(self, key: tuple[Any, ...],
                             expiry_ms: int) -> Iterator[tuple[Any, ...]]:
        """The watermark passed the session's end + gap: no event can extend it any more."""
        session = self.session.get()
        if session is not None:
            yield _closed(key[0], session, self._counts({}, True), "timer")
        self._forget()

    def _counts(self, changed: dict[str, int], stored: bool) -> dict[str, int]:
        """The session's page counts: those in state (if they are its own) updated by
        `changed`."""
        counts = dict(self.pages.iterator()) if stored else {}
        counts.update(changed)
        return counts

    def _forget(self) -> None:
        self.session.clear()
        self.pages.clear()


def _closed(user: str, session: dict[str, int], counts: dict[str, int],
            closed_by: str) -> tuple[Any, ...]:
    top = max(counts.items(), key=lambda item: (item[1], item[0]))[0]
    return (user, pd.Timestamp(session["start"], unit="ms", tz="UTC"),
            pd.Timestamp(session["end"], unit="ms", tz="UTC"), session["events"], len(counts),
            top, closed_by)


@dataclass(frozen=True)
class Generated:
    events: int
    stamps: list[np.ndarray]  # event times (epoch ms) of each file, in read order


def generate_input(directory: Path, args: argparse.Namespace) -> Generated:
    """`args.files` parquet files; file i holds events of minute i, except for a few late rows
    from three minutes earlier. Some users leave for good partway through."""
    directory.mkdir(parents=True)
    rng = np.random.default_rng(args.seed)
    users, files, events = args.users, args.files, args.events
    first_stamp = time.time() - 3600
    weights = 1.0 / np.arange(1, users + 1) ** 0.8  # a few busy users, many quiet ones
    # a share of the users (busy ones too) goes silent after a random minute, never to return
    leaves = rng.random(users) < args.leaving
    last_minute = np.where(leaves, rng.integers(0, max(1, files - 3), users), files)
    stamps: list[np.ndarray] = []
    for i in range(files):
        active = weights * (last_minute >= i)
        user_ids = rng.choice(users, size=events, p=active / active.sum())
        ts = FIRST_MINUTE_MS + i * MINUTE_MS + rng.integers(0, MINUTE_MS, events)
        if i >= 3:  # devices that reconnect: rows from three minutes ago
            late = rng.random(events) < args.late
            ts[late] = FIRST_MINUTE_MS + (i - 3) * MINUTE_MS + rng.integers(0, MINUTE_MS,
                                                                            int(late.sum()))
        frame = pd.DataFrame({
            "user": [f"user-{u:05d}" for u in user_ids],
            "page": [PAGES[p] for p in rng.integers(0, len(PAGES), events)],
            "ts": pd.to_datetime(ts, unit="ms", utc=True),
        })
        path = directory / f"views-{i:04d}.parquet"
        frame.to_parquet(path, index=False, coerce_timestamps="us")  # Spark reads us, not ns
        # Spark takes files in modification-time order (ties in arbitrary order): one second each
        stamp = first_stamp + i
        os.utime(path, (stamp, stamp))
        stamps.append(ts)
    return Generated(files * events, stamps)


def watermark_rule(stamps: list[np.ndarray], delay_ms: int) -> tuple[int, int]:
    """(late rows, final watermark) when batch i reads file i, computed as Spark does: a batch
    uses the newest event time of earlier batches minus the delay (starting at 0, never moving
    back), and drops rows at or before the watermark the previous batch used."""
    watermark, late_limit, late = 0, None, 0
    for batch in stamps:
        if late_limit is not None:
            late += int((batch <= late_limit).sum())
        late_limit, watermark = watermark, max(watermark, int(batch.max()) - delay_ms)
    return late, watermark


def clock(ms: int) -> str:
    """An event time for people: the time of day, UTC."""
    if ms <= 0:
        return "none yet"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S")


def print_batch(progress: BatchProgress, closed: int, by_timer: int) -> None:
    loads = ",".join(f"{kind}:{n}" for kind, n in sorted(progress.load_kinds.items()))
    print(f"batch {progress.batch_id:3d} | {progress.input_rows:6d} events, "
          f"{progress.late_rows:3d} late | watermark {clock(progress.watermark_ms):>8} | "
          f"timers fired {progress.timers_fired:4d} | sessions closed {closed:4d} "
          f"({by_timer:4d} by timer) | "
          f"batch {progress.total_seconds * 1000:5.0f} ms | commit "
          f"{progress.max_task_commit_seconds * 1000:5.1f} ms | changelog "
          f"{progress.changelog_bytes / 1024:6.1f} KiB | materialized "
          f"{progress.materialized_partitions}/{sum(progress.load_kinds.values())} | "
          f"loads {loads} | cleaned {progress.cleanup_deleted_files}", flush=True)


def summarize(progress: list[BatchProgress], elapsed: float, events: int) -> None:
    durations = [p.total_seconds * 1000 for p in progress]
    commits = [p.max_task_commit_seconds * 1000 for p in progress]
    print(f"\n{len(progress)} batches, {events} events in {elapsed:.1f} s "
          f"({events / elapsed:,.0f} events/s including start-up)")
    print(f"batch duration ms: p50 {statistics.median(durations):.0f}, "
          f"max {max(durations):.0f}; state commit ms (slowest partition): "
          f"p50 {statistics.median(commits):.1f}, max {max(commits):.1f}")


@dataclass(frozen=True)
class OpenSessions:
    events: int
    sessions: int
    past_watermark: int  # sessions whose end + gap the final watermark already passed
    without_timer: int  # sessions without their timer at end + gap


def open_sessions(spark: Any, checkpoint: str, settings: dict[str, str], gap_ms: int,
                  watermark_ms: int) -> OpenSessions:
    """The sessions still open in the newest checkpoint, checked against the watermark."""
    state = read_state(spark, checkpoint, settings=settings).where(
        "state_variable IN ('session', 'timers')").toPandas()
    sessions = [json.loads(v) for v in state[state["state_variable"] == "session"]["value"]]
    session_keys = state[state["state_variable"] == "session"]["key"].tolist()
    timers = set(zip(state[state["kind"] == "timer"]["key"],
                     state[state["kind"] == "timer"]["value"].map(json.loads), strict=True))
    return OpenSessions(
        events=sum(s["events"] for s in sessions), sessions=len(sessions),
        past_watermark=sum(1 for s in sessions if s["end"] + gap_ms <= watermark_ms),
        without_timer=sum(1 for k, s in zip(session_keys, sessions, strict=True)
                          if (k, s["end"] + gap_ms) not in timers))


def run(args: argparse.Namespace, checkpoint: str, settings: dict[str, str],
        engine_checkpoint: str | None = None) -> int:
    """Generate the input, run the query to the end, print and check; exit status."""
    work = Path(args.work_dir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    generated = generate_input(work / "input", args)
    spark = (remote_session(args.remote) if args.remote
             else local_session("pyspark-dstl-main-job", args.partitions))
    sink_dir = work / "sink"
    sink_dir.mkdir()

    def sink(df: Any, batch_id: int) -> None:
        # A real job would write its rows somewhere; this one writes what the check needs,
        # one file per batch id, replaced whole, so a replayed batch counts once. (Under Spark
        # Connect this runs on the server: it must write somewhere, not to a variable here.)
        rows = df.collect()
        written = sink_dir / f".batch-{batch_id:06d}.tmp"
        written.write_text(json.dumps({
            "events": sum(row["events"] for row in rows), "sessions": len(rows),
            "by_timer": sum(1 for row in rows if row["closed_by"] == "timer")}))
        written.replace(sink_dir / f"batch-{batch_id:06d}.json")

    delay = f"{args.watermark_delay} seconds"
    stream = (stateful(spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
                       .parquet(str(work / "input")))
              .group_by("user")
              .process(Sessionizer(args.gap), OUTPUT_SCHEMA,
                       checkpoint_location=checkpoint, partitions=args.partitions,
                       settings=settings, time_mode="event_time", event_time="ts",
                       watermark_delay=delay)
              .foreach_batch(sink)
              .on_progress(lambda p: print_batch(p, *closed_of(sink_dir, p.batch_id)[1:])))
    progress_log = log_progress_to(work / "progress.jsonl")
    print(f"input: {generated.events} events in {args.files} files under {work / 'input'}")
    print(f"checkpoint: {checkpoint}")
    print(f"per-batch JSON lines (logger {PROGRESS_JSON_LOGGER!r}): {progress_log}")
    print(f"sessions end after {args.gap} s without events (event time); watermark delay "
          f"{delay}\n")
    started = time.monotonic()
    if python_sources_run_available_now(spark):
        query = stream.start(trigger={"availableNow": True}, engine_checkpoint=engine_checkpoint)
        query.awaitTermination()
    else:  # PySpark 4.0, 4.1: the same batches, then stopped here
        query = stream.start(trigger={"processingTime": "0 seconds"},
                             engine_checkpoint=engine_checkpoint)
        query.processAllAvailable()
        query.stop()
    if stream.progress:
        summarize(stream.progress, time.monotonic() - started, generated.events)
    else:  # Spark Connect: foreachBatch, hence BatchProgress, lives in the server's process
        print(f"{len(query.recentProgress)} progress reports from Spark (BatchProgress stays "
              f"on the Connect server; see docs/deploying.md)")
    ok = check(spark, args, checkpoint, settings, generated, stream, sink_dir)
    spark.stop()
    return 0 if ok else 1


def log_progress_to(path: Path) -> Path:
    """The backend logs every metric of a batch as one JSON object at DEBUG; here they go to
    a file, one line per batch, beside the table this job prints."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger(PROGRESS_JSON_LOGGER)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return path


def remote_session(url: str) -> Any:
    """A Spark Connect session (url like sc://127.0.0.1:15002). The server runs the query,
    its foreachBatch function and the Python workers; it must have pyspark-dstl installed
    and reach the input and checkpoint paths given here."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).getOrCreate()


def closed_of(sink_dir: Path, batch_id: int) -> tuple[int, int, int]:
    """(events, sessions, sessions closed by their timer) the sink wrote for a batch."""
    path = sink_dir / f"batch-{batch_id:06d}.json"
    if not path.exists():
        return 0, 0, 0
    written = json.loads(path.read_text())
    return written["events"], written["sessions"], written["by_timer"]


def check(spark: Any, args: argparse.Namespace, checkpoint: str, settings: dict[str, str],
          generated: Generated, stream: Any, sink_dir: Path) -> bool:
    """The self-check: print each verdict, return whether all hold. The batches' clocks come
    from the commit log (what the checkpoint recorded), so this works under Connect too."""
    log = stream.operator.commit_log()
    times = [log.read(batch).extra.get("time", {}) for batch in sorted(log.batch_ids())]
    final_watermark = int(times[-1]["watermark_ms"])
    late = sum(int(t.get("late_rows", 0)) for t in times)
    closed = [closed_of(sink_dir, batch) for batch in sorted(log.batch_ids())]
    gap_ms = args.gap * 1000
    still_open = open_sessions(spark, checkpoint, settings, gap_ms, final_watermark)
    expected_late, expected_watermark = watermark_rule(generated.stamps,
                                                       args.watermark_delay * 1000)
    in_closed = sum(events for events, _, _ in closed)
    by_timer = sum(timer for _, _, timer in closed)
    print(f"sessions closed: {sum(n for _, n, _ in closed)}, {by_timer} of them by their "
          f"timer (no further event of the user); {still_open.sessions} still open")
    verdicts = [
        (f"no session open past the final watermark {clock(final_watermark)}: "
         f"{still_open.past_watermark} past it, {still_open.without_timer} without their "
         f"timer at end + gap", still_open.past_watermark == still_open.without_timer == 0),
        (f"events in closed sessions {in_closed} + in open sessions {still_open.events} + "
         f"late {late} = {in_closed + still_open.events + late} (input {generated.events})",
         in_closed + still_open.events + late == generated.events),
        (f"late rows {late}, final watermark {clock(final_watermark)} (by the watermark rule: "
         f"{expected_late}, {clock(expected_watermark)})",
         late == expected_late and final_watermark == expected_watermark),
    ]
    for text, holds in verdicts:
        print(f"{'ok      ' if holds else 'MISMATCH'} {text}")
    return all(holds for _, holds in verdicts)


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


def parser() -> argparse.ArgumentParser:
    default_dir = Path(__file__).resolve().parent / "out" / "main_job"
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work-dir", default=str(default_dir), help="wiped and refilled")
    p.add_argument("--files", type=int, default=8, help="input files = minutes = batches")
    p.add_argument("--events", type=int, default=5_000, help="events per file")
    p.add_argument("--users", type=int, default=4_000)
    p.add_argument("--partitions", type=int, default=4, help="state partitions")
    p.add_argument("--gap", type=int, default=120, help="session gap, event-time seconds")
    p.add_argument("--watermark-delay", type=int, default=30,
                   help="how late rows may be, event-time seconds")
    p.add_argument("--leaving", type=float, default=0.3,
                   help="share of users who go silent for good partway through")
    p.add_argument("--late", type=float, default=0.003,
                   help="share of rows (from the 4th file on) that arrive 3 minutes late")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--remote", help="run through a Spark Connect server, e.g. "
                                    "sc://127.0.0.1:15002 (default: a local session)")
    return p


def main() -> int:
    args = parser().parse_args()
    checkpoint = str(Path(args.work_dir).resolve() / "checkpoint")
    # snapshots at the default pace (every 10 commits of a store), whichever worker commits
    settings = {"stateStore.minBatchesToRetain": "10", "query.cleanupInterval": "5"}
    return run(args, checkpoint, settings)


if __name__ == "__main__":
    sys.exit(main())
