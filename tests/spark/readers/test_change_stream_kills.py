"""The change feed stream under kills: a producer (PySpark's query with the switch) and a
consumer (`dstl-changes` into Spark's parquet file sink) run as processes of their own and are
killed, either or both, at random moments and once right after the producer's commit entry
(before Spark's engine recorded the batch, so the producer runs that batch again). After
clean final runs, the file sink holds every change exactly once and the mirror it describes
equals the producer's state as Spark's `statestore` source shows it."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.change_feed_jobs import item_frames, mirror_of, state_of
from tests.support.compat_runs import write_inputs
from tests.support.paths import REPO_ROOT
from tests.support.state_data import plain

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(2400)]

SEED = 4242
CYCLES = 4
FILES = 10
FIRST_KILL_S = 3.0  # before this a job is still starting its JVM


class Job:
    """One job process in a session of its own: killing the session kills its JVM and
    Python workers with it."""

    def __init__(self, name: str, args: list[str], logs: Path,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log = logs / f"{name}-{time.monotonic_ns()}.log"
        environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.change_feed_jobs", *args], cwd=REPO_ROOT,
            env=environment, stdout=self.log.open("w"), stderr=subprocess.STDOUT,
            start_new_session=True)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def finish(self, timeout: float = 600) -> str:
        """Wait for the job to end by itself; its output."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        return self.log.read_text()


def test_kills_of_either_query_leave_every_change_once_and_the_mirror_exact(
        spark: Any, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    inputs, location = tmp_path / "in", str(tmp_path / "ckpt")
    feed, output, logs = str(tmp_path / "feed"), str(tmp_path / "out"), tmp_path / "logs"
    logs.mkdir()
    frames = item_frames(FILES, rows=60, users=9, seed=SEED)
    write_inputs(inputs, frames[:2])
    began = time.monotonic()
    first = Job("producer", ["producer", str(inputs), location], logs)
    assert "DONE" in first.finish(), first.log.read_text()[-3000:]
    # a job's life on this machine (start-up and two batches, as in every cycle below): the
    # random kills land inside it however fast or loaded the machine is
    lifetime = time.monotonic() - began
    last_kill_s = max(FIRST_KILL_S + 1, 0.9 * lifetime)
    written = 2
    killed_running = 0
    for cycle in range(CYCLES):
        write_inputs(inputs, frames[written:written + 2], start=written)
        written += 2
        if cycle == 0:  # the producer dies right after its second commit entry
            producer = Job("producer", ["producer", str(inputs), location], logs,
                           {"DSTL_KILL_POINT": "commit_log_after:2"})
            consumer = Job("consumer", ["consumer", location, feed, output], logs)
            assert "killed at commit_log_after" in producer.finish(), producer.log.read_text()
            consumer.finish()
            continue
        producer = Job("producer", ["producer", str(inputs), location], logs)
        consumer = Job("consumer", ["consumer", location, feed, output], logs)
        victims = rng.choice([[producer], [consumer], [producer, consumer]])
        time.sleep(rng.uniform(FIRST_KILL_S, last_kill_s))
        for job in victims:
            killed_running += job.process.poll() is None
            job.kill()
        for job in (producer, consumer):
            job.finish()
    assert killed_running >= 2, (f"the random kills came after the jobs had ended (a job "
                                 f"lived {lifetime:.1f} s)")
    producer = Job("producer", ["producer", str(inputs), location], logs)
    assert "DONE" in producer.finish(), producer.log.read_text()[-3000:]
    consumer = Job("consumer", ["consumer", location, feed, output], logs)
    assert "DONE" in consumer.finish(), consumer.log.read_text()[-3000:]

    delivered = sorted((plain(row) for row in spark.read.parquet(output).collect()),
                       key=json.dumps)
    changes = (spark.read.format("dstl-statestore").option("stateVarName", "items")
               .option("readChangeFeed", "true").option("changeStartBatchId", 0)
               .load(location))
    assert delivered == sorted((plain(row) for row in changes.collect()), key=json.dumps), (
        f"seed {SEED}")
    assert mirror_of(delivered) == state_of(spark, location), f"seed {SEED}"
