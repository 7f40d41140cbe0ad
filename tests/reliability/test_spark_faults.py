"""Spark: executors die in the middle of a batch and in the middle of a snapshot upload.

A standalone cluster of three one-core workers on loopback runs the keyed count against an S3
root (moto behind the fault proxy). The test kills the worker under a task that is holding
still inside batch 3, then, with every SST upload held at the proxy, the worker whose Python
worker is uploading a snapshot. The query must finish every batch with exactly the pandas
model's state. The driver dying between this library's commit log and the engine's commit
is tests/spark/builder/test_query.py::test_restart_after_the_driver_died_between_the_two_commits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.soak import verify_root
from tests.reliability.spark_driver import HELD_MARKER
from tests.support import FaultRule, S3Env
from tests.support.spark import (
    REPO_ROOT,
    StandaloneCluster,
    count_model,
    make_batches,
    prepare_environment,
    stored_counts,
    write_batches,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]
BATCHES = 8
HOLD = (3, 0)  # (batch, partition) whose first attempt holds still
DEADLINE = 300.0  # the whole run takes about a minute here; generous for a loaded machine
SST_HOLD_SECONDS = 20.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    try:
        started = StandaloneCluster(tmp_path / "cluster", workers=3).start()
    except RuntimeError as exc:
        pytest.skip(f"a standalone cluster cannot start here: {exc}")
    yield started
    started.stop()


def s3_conf(s3: S3Env) -> dict[str, str]:
    options = s3.options.storage
    return {"spark.dstl.changelog.s3.endpoint": str(options.s3_endpoint_url),
            "spark.dstl.changelog.s3.region": str(options.s3_region),
            "spark.dstl.changelog.s3.accessKeyId": str(options.s3_access_key_id),
            "spark.dstl.changelog.s3.secretAccessKey": str(options.s3_secret_access_key),
            "spark.dstl.changelog.s3.addressingStyle": "path"}


class Driver:
    """The driver process; its output lines are collected by a thread."""

    def __init__(self, args: list[str]) -> None:
        prepare_environment()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.spark_driver", *args], cwd=REPO_ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def committed(self) -> list[int]:
        return [int(line.split()[-1]) for line in list(self.lines)
                if line.startswith("committed batch")]

    def tail(self) -> str:
        return "".join(self.lines[-40:])


def wait_until(condition: Any, what: str, driver: Driver, deadline: float) -> Any:
    while True:
        found = condition()
        if found:
            return found
        assert driver.process.poll() is None, f"the driver ended before {what}:\n{driver.tail()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{driver.tail()}"
        time.sleep(0.1)


def lose_executor(cluster: StandaloneCluster, daemon: int, worker: int) -> int:
    """Kill a standalone worker with its executor and the executor's Python workers, as a
    lost host would; returns the worker's index."""
    index = next(i for i, process in enumerate(cluster.workers) if process.pid == worker)
    os.killpg(daemon, signal.SIGKILL)
    cluster.kill_worker(index)
    return index


def last_groups_of_partition(markers: Path, partition: int) -> tuple[int, int]:
    """(daemon, worker) groups that processed `partition` last: in its latest batch, the
    attempt that began last (a batch whose task was retried elsewhere has a marker from each
    attempt, and the lost one's must not win by its process ids)."""
    seen = []
    for path in markers.glob("seen-*"):
        batch, part, daemon, worker = (int(x) for x in path.name.split("-")[1:])
        if part == partition:
            seen.append(((batch, path.stat().st_mtime_ns), (daemon, worker)))
    return max(seen)[1]


def test_executor_loss_inside_a_batch_and_inside_a_snapshot_upload_keeps_exact_state(
        spark: Any, cluster: StandaloneCluster, s3: S3Env, tmp_path: Path) -> None:
    frames = make_batches(BATCHES, rows=1000, keys=300, seed=51)
    write_batches(tmp_path / "in", frames)
    markers = tmp_path / "markers"
    markers.mkdir()
    conf = {**s3_conf(s3), "spark.dstl.stateStore.localDir": str(tmp_path / "local"),
            "spark.dstl.query.engineCheckpointLocation": str(tmp_path / "engine"),
            "spark.dstl.materialization.interval": "off",
            "spark.dstl.materialization.everyNCommits": "2"}
    args = [cluster.url, str(tmp_path / "in"), s3.url, str(markers),
            "--hold", f"{HOLD[0]},{HOLD[1]}"]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    deadline = time.monotonic() + DEADLINE
    driver = Driver(args)
    try:
        # 1. inside a batch: the task of partition 0 in batch 3 holds still; kill its worker
        held = markers / HELD_MARKER
        wait_until(lambda: held.exists() and held.read_text(), "the held task", driver,
                   deadline)
        daemon, worker = (int(x) for x in held.read_text().split())
        first = lose_executor(cluster, daemon, worker)
        # 2. inside a snapshot upload: hold every SST upload, kill the uploader's worker
        s3.proxy.reset_log()
        s3.proxy.add_rule(FaultRule("delay", method="PUT", path_contains="/sst/",
                                    delay=SST_HOLD_SECONDS))
        upload = wait_until(lambda: s3.proxy.records("PUT", "/sst/"), "a snapshot upload",
                            driver, deadline)[0]
        partition = int(upload.path.split("/state/")[1].split("/")[1])
        second = lose_executor(cluster, *last_groups_of_partition(markers, partition))
        assert second != first, "the first worker is dead: it cannot be uploading"
        s3.proxy.clear_rules()
        assert driver.process.wait(max(1.0, deadline - time.monotonic())) == 0, driver.tail()
    finally:
        if driver.process.poll() is None:
            driver.process.kill()
            driver.process.wait()
    dropped = [r for r in s3.proxy.records("PUT", "/sst/") if r.fault and r.status is None]
    assert dropped, "the killed worker was uploading a snapshot: its held uploads died with it"
    assert sorted(set(driver.committed())) == list(range(BATCHES)), driver.tail()
    assert stored_counts(spark, s3.url, settings=s3_conf(s3)) == count_model(frames)
    assert verify_root(s3.url, s3) == []
