"""Dedup with expiry: drop repeated deliveries of an id for a retention period of event time.

An at-least-once upstream delivers payment events (id, ts, amount) and sometimes delivers the
same id again, seconds or minutes later. The query keeps, per id, the event time of the delivery
it let through (a ValueState) and drops every delivery of that id up to --retention seconds
later. An event-time timer at that delivery's time + retention forgets the id once the
watermark passes it, so state holds only ids that can still be repeated; a delivery that comes
after that is let through as new (and starts a new retention period).

Every batch prints what it let through, what it dropped (with an example), the watermark and
how many ids expired. At the end the job checks itself:
- let through + dropped + late = input deliveries;
- the deliveries let through and dropped are exactly those the rule, applied here to the files
  in arrival order, lets through and drops;
- the ids left in state are exactly those whose retention the final watermark has not passed,
  each with its timer; every other id was forgotten by its timer.

    python examples/dedup_job.py                # well under a minute on 2 cores
    python examples/dedup_job.py --files 5      # shorter
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from main_job import FIRST_MINUTE_MS, MINUTE_MS, clock, local_session

from pyspark_dstl.spark import (
    BatchProgress,
    StatefulProcessor,
    StatefulProcessorHandle,
    read_state,
    stateful,
)

INPUT_SCHEMA = "id string, ts timestamp, amount long"
OUTPUT_SCHEMA = "id string, ts timestamp, amount long, kept_ts timestamp, status string"
KEPT, DUPLICATE = "kept", "duplicate"
REPEAT_LAGS = np.array([0, 1, 2, 4, 6])  # minutes between a delivery and its repeat
REPEAT_ODDS = np.array([0.35, 0.25, 0.15, 0.15, 0.1])


class Dedup(StatefulProcessor):
    """Per id: the event time of the delivery let through, and a timer that forgets it."""

    def __init__(self, retention_seconds: int) -> None:
        self.retention_ms = retention_seconds * 1000

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.kept_at = handle.get_value_state("kept_at")  # epoch ms

    def handle_input_rows(self, key: tuple[Any, ...],
                          rows: Iterator[pd.DataFrame]) -> Iterator[tuple[Any, ...]]:
        frame = pd.concat(list(rows))
        kept_at = self.kept_at.get()
        old_timer = None if kept_at is None else kept_at + self.retention_ms
        stamps = frame["ts"].dt.as_unit("ms").astype("int64").tolist()
        for ts, amount in sorted(zip(stamps, frame["amount"].tolist(), strict=True)):
            if kept_at is not None and ts - kept_at <= self.retention_ms:
                yield (key[0], _time(ts), amount, _time(kept_at), DUPLICATE)
            else:
                kept_at = ts
                yield (key[0], _time(ts), amount, _time(ts), KEPT)
        assert kept_at is not None
        timer = kept_at + self.retention_ms
        if old_timer is not None and old_timer != timer:
            self.handle.delete_timer(old_timer)  # a new retention period replaces the old one
        if timer <= self.handle.watermark_ms:
            self.kept_at.clear()  # its retention is already over: nothing to remember
        else:
            self.handle.register_timer(timer)
            self.kept_at.update(kept_at)

    def handle_expired_timer(self, key: tuple[Any, ...],
                             expiry_ms: int) -> Iterator[tuple[Any, ...]]:
        """The watermark passed the retention: a repeat now would be late anyway or new."""
        self.kept_at.clear()
        return iter(())


def _time(ms: int) -> pd.Timestamp:
    return pd.Timestamp(ms, unit="ms", tz="UTC")


@dataclass
class Generated:
    deliveries: int = 0
    files: list[pd.DataFrame] = field(default_factory=list)  # in read order


def generate_input(directory: Path, args: argparse.Namespace) -> Generated:
    """File i holds minute i's deliveries: new ids, and repeats of ids first delivered
    0 to 6 minutes earlier."""
    directory.mkdir(parents=True)
    rng = np.random.default_rng(args.seed)
    first_stamp = time.time() - 3600
    generated = Generated()
    fresh_per_minute: list[np.ndarray] = []
    repeats = int(args.deliveries * args.repeats)
    for i in range(args.files):
        fresh = np.array([f"pay-{i:03d}-{n:05d}" for n in range(args.deliveries - repeats)])
        fresh_per_minute.append(fresh)
        lags = rng.choice(REPEAT_LAGS, size=repeats, p=REPEAT_ODDS)
        lags = lags[lags <= i]
        repeated = [fresh_per_minute[i - lag][rng.integers(len(fresh_per_minute[i - lag]))]
                    for lag in lags]
        ids = np.concatenate([fresh, np.array(repeated, dtype=fresh.dtype)])
        ts = FIRST_MINUTE_MS + i * MINUTE_MS + rng.integers(0, MINUTE_MS, len(ids))
        frame = pd.DataFrame({"id": ids, "ts": pd.to_datetime(ts, unit="ms", utc=True),
                              "amount": rng.integers(1, 10_000, len(ids))})
        frame = frame.sample(frac=1, random_state=int(rng.integers(1 << 31)))
        path = directory / f"deliveries-{i:04d}.parquet"
        frame.to_parquet(path, index=False, coerce_timestamps="us")
        stamp = first_stamp + i  # Spark reads files in modification-time order
        os.utime(path, (stamp, stamp))
        generated.files.append(frame)
        generated.deliveries += len(frame)
    return generated


@dataclass(frozen=True)
class RuleOutcome:
    kept: list[tuple[str, int]]  # (id, event time ms) let through, sorted
    dropped: list[tuple[str, int]]
    last_kept: dict[str, int]  # id -> event time of its latest delivery let through


def dedup_rule(files: list[pd.DataFrame], retention_ms: int) -> RuleOutcome:
    """The dedup rule applied to the files in arrival order (a batch's rows in event-time
    order): a delivery within the retention of the id's last one let through is dropped."""
    kept: list[tuple[str, int]] = []
    dropped: list[tuple[str, int]] = []
    last_kept: dict[str, int] = {}
    for frame in files:
        stamps = frame["ts"].dt.as_unit("ms").astype("int64")
        for ts, id_ in sorted(zip(stamps.tolist(), frame["id"].tolist(), strict=True)):
            before = last_kept.get(id_)
            if before is not None and ts - before <= retention_ms:
                dropped.append((id_, ts))
            else:
                kept.append((id_, ts))
                last_kept[id_] = ts
    return RuleOutcome(sorted(kept), sorted(dropped), last_kept)


def print_batch(progress: BatchProgress, kept: int, dropped: pd.DataFrame) -> None:
    example = ""
    if len(dropped):
        row = dropped.iloc[0]
        age = (row["ts"] - row["kept_ts"]).total_seconds()
        example = (f" | e.g. dropped {row['id']} at {row['ts']:%H:%M:%S} "
                   f"({age:.0f} s after the delivery let through)")
    print(f"batch {progress.batch_id:3d} | {progress.input_rows:5d} deliveries: {kept:5d} let "
          f"through, {len(dropped):4d} dropped, {progress.late_rows} late | watermark "
          f"{clock(progress.watermark_ms):>8} | {progress.timers_fired:5d} ids expired | "
          f"batch {progress.total_seconds * 1000:5.0f} ms{example}", flush=True)


def run(args: argparse.Namespace) -> int:
    work = Path(args.work_dir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    generated = generate_input(work / "input", args)
    checkpoint = str(work / "checkpoint")
    spark = local_session("pyspark-dstl-dedup-job", args.partitions)
    outputs: dict[int, pd.DataFrame] = {}

    def sink(df: Any, batch_id: int) -> None:
        # a real job would write the kept rows to its table (idempotently per batch id) and
        # the dropped ones to an audit log
        outputs[batch_id] = df.toPandas()

    def report(progress: BatchProgress) -> None:
        out = outputs.get(progress.batch_id, pd.DataFrame({"status": []}))
        print_batch(progress, int((out["status"] == KEPT).sum()),
                    out[out["status"] == DUPLICATE])

    delay = f"{args.watermark_delay} seconds"
    stream = (stateful(spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
                       .parquet(str(work / "input")))
              .group_by("id")
              .process(Dedup(args.retention), OUTPUT_SCHEMA, checkpoint_location=checkpoint,
                       partitions=args.partitions, time_mode="event_time", event_time="ts",
                       watermark_delay=delay)
              .foreach_batch(sink)
              .on_progress(report))
    print(f"input: {generated.deliveries} deliveries in {args.files} files; retention "
          f"{args.retention} s of event time, watermark delay {delay}\n")
    query = stream.start(trigger={"availableNow": True})
    query.awaitTermination()
    ok = check(spark, args, checkpoint, generated, stream.progress, outputs)
    spark.stop()
    return 0 if ok else 1


def check(spark: Any, args: argparse.Namespace, checkpoint: str, generated: Generated,
          progress: list[BatchProgress], outputs: dict[int, pd.DataFrame]) -> bool:
    """The self-check: print each verdict, return whether all hold."""
    retention_ms = args.retention * 1000
    rule = dedup_rule(generated.files, retention_ms)
    out = pd.concat(outputs.values(), ignore_index=True)
    stamps = out["ts"].dt.as_unit("ms").astype("int64").tolist()
    rows = list(zip(out["id"].tolist(), stamps, out["status"].tolist(), strict=True))
    kept = sorted((i, t) for i, t, status in rows if status == KEPT)
    dropped = sorted((i, t) for i, t, status in rows if status == DUPLICATE)
    late = sum(p.late_rows for p in progress)
    watermark = progress[-1].watermark_ms
    state = read_state(spark, checkpoint).toPandas()
    remembered = {json.loads(k)[0]: json.loads(v) for k, v in
                  zip(state[state["state_variable"] == "kept_at"]["key"],
                      state[state["state_variable"] == "kept_at"]["value"], strict=True)}
    timers = {(json.loads(k)[0], json.loads(v)) for k, v in
              zip(state[state["kind"] == "timer"]["key"],
                  state[state["kind"] == "timer"]["value"], strict=True)}
    expected_state = {i: t for i, t in rule.last_kept.items() if t + retention_ms > watermark}
    expected_timers = {(i, t + retention_ms) for i, t in expected_state.items()}
    print(f"\n{len(progress)} batches; ids forgotten by their timer: "
          f"{sum(p.timers_fired for p in progress)}; ids still remembered: {len(remembered)}")
    verdicts = [
        (f"let through {len(kept)} + dropped {len(dropped)} + late {late} = "
         f"{len(kept) + len(dropped) + late} (input {generated.deliveries})",
         len(kept) + len(dropped) + late == generated.deliveries),
        (f"let through and dropped exactly as the rule says ({len(rule.kept)} and "
         f"{len(rule.dropped)})", kept == rule.kept and dropped == rule.dropped),
        (f"ids in state: those whose retention the final watermark {clock(watermark)} has not "
         f"passed ({len(expected_state)}), each with its timer",
         remembered == expected_state and timers == expected_timers),
    ]
    for text, holds in verdicts:
        print(f"{'ok      ' if holds else 'MISMATCH'} {text}")
    return all(holds for _, holds in verdicts)


def parser() -> argparse.ArgumentParser:
    default_dir = Path(__file__).resolve().parent / "out" / "dedup_job"
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work-dir", default=str(default_dir), help="wiped and refilled")
    p.add_argument("--files", type=int, default=8, help="input files = minutes = batches")
    p.add_argument("--deliveries", type=int, default=2_000, help="deliveries per file")
    p.add_argument("--repeats", type=float, default=0.3, help="share of repeated deliveries")
    p.add_argument("--retention", type=int, default=180, help="event-time seconds an id is "
                   "remembered after the delivery let through")
    p.add_argument("--watermark-delay", type=int, default=20,
                   help="how late rows may be, event-time seconds")
    p.add_argument("--partitions", type=int, default=4, help="state partitions")
    p.add_argument("--seed", type=int, default=11)
    return p


def main() -> int:
    return run(parser().parse_args())


if __name__ == "__main__":
    sys.exit(main())
