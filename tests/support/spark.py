"""One SparkSession for the whole test session: local mode on loopback, UI off, fast settings.

Start-up costs 5-15 s here, so every Spark test shares it; tests must not change session-wide
settings they do not restore. "local[2,4]" gives two cores and up to four attempts per task, so
tests can make a first attempt fail on purpose and watch the retry.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pyspark_dstl.spark import (
    StatefulProcessor,
    StatefulProcessorHandle,
    StatefulStream,
    VectorizedStatefulProcessor,
    stateful,
)
from tests.support.local_file_system import file_system_settings
from tests.support.paths import REPO_ROOT

DEFAULT_MASTER = "local[2,4]"
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"


def in_process_checkpoint_files() -> dict[str, str]:
    """Spark's file-system-based checkpoint file manager, and Hadoop's local file system with
    permissions set in the JVM (tests/support/local_file_system.py), for the tests' sessions.

    Spark's default manager renames through Hadoop's FileContext, which on a local directory
    without Hadoop's native library starts a `readlink` process for every path it renames
    (about 40 per micro-batch of a small stateful query here: offsets, commits and state
    files, each with its checksum file); the file-system-based one, Spark's own and chosen by
    this setting, renames in the JVM. Both engines of a comparison run on it; what they write
    is the same files. The benchmarks keep Spark's default: they measure what users run."""
    import pyspark

    major_minor = tuple(int(part) for part in pyspark.__version__.split(".")[:2])
    package = "org.apache.spark.sql.execution.streaming"
    if major_minor >= (4, 1):
        package += ".checkpointing"
    return {CHECKPOINT_FILE_MANAGER: f"{package}.FileSystemBasedCheckpointFileManager",
            **file_system_settings()}


def session_settings(extra: Mapping[str, str] | None = None,
                     spark_defaults: bool = False) -> dict[str, str]:
    """The settings every test session uses, plus `extra`; `spark_defaults` leaves Spark's
    checkpoint file manager as it is (the benchmarks)."""
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "4",
        "spark.python.worker.reuse": "true",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.pollingDelay": "10ms",
        "spark.sql.streaming.noDataProgressEventInterval": "100ms",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    }
    if not spark_defaults:
        settings.update(in_process_checkpoint_files())
    settings.update(extra or {})
    return settings


WORKER_SITE = REPO_ROOT / "tests" / "support" / "worker_site"


def prepare_environment() -> None:
    """Python workers must run this interpreter on loopback, import `tests.support`, and read
    pyspark from the installed package rather than Spark's zip (worker_site/sitecustomize.py)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    missing = [entry for entry in (str(REPO_ROOT), str(WORKER_SITE)) if entry not in paths]
    if missing:
        os.environ["PYTHONPATH"] = os.pathsep.join([*missing, *paths])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("SPARK_LOCAL_HOSTNAME", "localhost")


def build_session(master: str = DEFAULT_MASTER, app_name: str = "pyspark-dstl-tests",
                  extra: Mapping[str, str] | None = None, spark_defaults: bool = False) -> Any:
    """A new (or the running) SparkSession with `session_settings`."""
    prepare_environment()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in session_settings(extra, spark_defaults).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


# --- inputs, models and processors shared by the Spark tests ----------------------------------
# Processors live here, not in test modules, so executors import them by name.

INPUT_SCHEMA = "user string, v long"
COUNT_SCHEMA = "user string, count long"


def count_table(rows: int) -> Any:
    """`rows` rows of COUNT_SCHEMA as an Arrow table (users u0, u1, ... counted 0, 1, ...)."""
    import pyarrow as pa

    return pa.table({"user": [f"u{i}" for i in range(rows)],
                     "count": pa.array(range(rows), pa.int64())})


def make_batches(count: int, rows: int, keys: int, seed: int = 0) -> list[Any]:
    """`count` pandas frames of `rows` rows over `keys` string keys."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    return [pd.DataFrame({"user": [f"user-{k}" for k in rng.integers(0, keys, rows)],
                          "v": np.arange(rows, dtype=np.int64) + i * rows})
            for i in range(count)]


def batch_frame(spark: Any, frame: Any) -> Any:
    """One batch's rows as the static DataFrame a foreachBatch function receives."""
    return spark.createDataFrame(frame, schema=INPUT_SCHEMA)


def write_batches(directory: Path, frames: list[Any], start: int = 0) -> None:
    """One parquet file per frame, in batch order.

    Spark's file source takes files in modification-time order and breaks ties by listing
    order, which is arbitrary; files written within one millisecond would make the batches
    differ from the frames. Each file gets its own second, increasing with its index.
    """
    directory.mkdir(parents=True, exist_ok=True)
    base = time.time() - 3600
    for offset, frame in enumerate(frames):
        path = directory / f"part-{start + offset:05d}.parquet"
        frame.to_parquet(path, index=False)
        stamp = base + start + offset
        os.utime(path, (stamp, stamp))


def count_model(frames: list[Any]) -> dict[str, int]:
    """What a keyed running count must hold after `frames`: a pandas group-by."""
    import pandas as pd

    if not frames:
        return {}
    counts = pd.concat(frames).groupby("user").size()
    return {str(k): int(v) for k, v in counts.items()}


def stored_counts(spark: Any, checkpoint: str, batch_id: int | None = None,
                  settings: Mapping[str, Any] | None = None) -> dict[str, int]:
    """The "count" value state of a checkpoint, read back through the dstl-state source."""
    import json

    from pyspark_dstl.spark import read_state

    frame = read_state(spark, checkpoint, batch_id, settings=settings).toPandas()
    frame = frame[frame["state_variable"] == "count"]
    return {json.loads(k)[0]: json.loads(v) for k, v in zip(frame["key"], frame["value"],
                                                             strict=True)}


def file_stream(spark: Any, directory: Path) -> Any:
    """A streaming DataFrame over the parquet files of `directory`, one file per batch."""
    return (spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
            .parquet(str(directory)))


class CountProcessor(StatefulProcessor):
    """Running count per key; emits (key, new count) for every key of the batch."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count")

    def handle_input_rows(self, key: tuple[Any, ...], rows: Any) -> Any:
        total = self.count.get(0) + sum(len(frame) for frame in rows)
        self.count.update(total)
        yield (key[0], total)


class VectorizedCountProcessor(VectorizedStatefulProcessor):
    """The same running count, with one bulk read and one bulk write per partition."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count")

    def handle_batch(self, batch: Any) -> Any:
        import numpy as np
        import pyarrow as pa

        totals = np.asarray(self.count.get_many(batch.keys, 0), dtype=np.int64) + batch.counts
        self.count.update_many(batch.keys, totals.tolist())
        yield pa.table({"user": batch.key_table.column(0), "count": pa.array(totals)})


class FailAfterCommitProcessor(CountProcessor):
    """Counts, then fails the first attempt of partition 0's task after its commit."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.partition = handle.partition_id

    def close(self) -> None:
        from pyspark import TaskContext

        context = TaskContext.get()
        if self.partition == 0 and context is not None and context.attemptNumber() == 0:
            raise RuntimeError("injected failure after the commit of attempt 0")


# --- running a stream over files, with a sink that keeps each batch's output ---------------

Outputs = dict[int, dict[str, int]]


def collecting_sink(outputs: Outputs) -> Callable[[Any, int], None]:
    """An idempotent sink: a replayed batch id replaces what that batch wrote before."""

    def sink(df: Any, batch_id: int) -> None:
        outputs[batch_id] = {row["user"]: row["count"] for row in df.collect()}

    return sink


def run_files(spark: Any, inputs: Path, checkpoint: Path, processor: Any = None,
              outputs: Outputs | None = None, **process_args: Any) -> StatefulStream:
    """Run a stream over every file in `inputs` (one per batch) until it has read them all."""
    stream = (stateful(file_stream(spark, inputs)).group_by("user")
              .process(processor or CountProcessor(), COUNT_SCHEMA,
                       checkpoint_location=str(checkpoint), **process_args)
              .foreach_batch(collecting_sink(outputs if outputs is not None else {})))
    query = stream.start(trigger={"availableNow": True})
    query.awaitTermination()
    assert query.exception() is None
    return stream


# --- a standalone cluster on loopback, for the worker-loss test ------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StandaloneCluster:
    """A master and workers started from the pyspark package, each in its own process group
    (so killing a worker's group also kills its executor and Python workers)."""

    def __init__(self, work_dir: Path, workers: int = 2) -> None:
        from pyspark.find_spark_home import _find_spark_home

        self.home = Path(_find_spark_home())
        self.work_dir = work_dir
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.count = workers
        self.master: Any = None
        self.workers: list[Any] = []

    def _spawn(self, name: str, *args: str) -> Any:
        import subprocess

        env = {**os.environ, "SPARK_HOME": str(self.home), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOG_DIR": str(self.work_dir / "logs"), "PYSPARK_PYTHON": sys.executable}
        log = open(self.work_dir / f"{name}.log", "w", encoding="utf-8")  # noqa: SIM115
        return subprocess.Popen([str(self.home / "bin" / "spark-class"), *args], env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        import time
        import urllib.request

        self.work_dir.mkdir(parents=True, exist_ok=True)
        ui = free_port()
        self.master = self._spawn("master", "org.apache.spark.deploy.master.Master",
                                  "--host", "127.0.0.1", "--port", str(self.port),
                                  "--webui-port", str(ui))
        for i in range(self.count):
            self.workers.append(self._spawn(
                f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.url,
                "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                "--webui-port", str(free_port()), "--work-dir", str(self.work_dir / f"w{i}")))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # the master's JSON status lists live workers
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                    import json

                    alive = [w for w in json.load(r)["workers"] if w["state"] == "ALIVE"]
                if len(alive) == self.count:
                    return self
            except OSError:
                pass
            if self.master.poll() is not None:
                break
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"standalone cluster did not start; see {self.work_dir}/*.log")

    def kill_worker(self, index: int) -> None:
        import signal

        os.killpg(self.workers[index].pid, signal.SIGKILL)
        self.workers[index].wait()

    def stop(self) -> None:
        import signal

        for process in [*self.workers, self.master]:
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def cluster_session(master: str, app_name: str, local_dir: str) -> Any:
    """A driver's session on the standalone test cluster: one core and little memory per
    executor, retried tasks, this checkout on the executors' path, state under `local_dir`."""
    prepare_environment()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    settings = session_settings({
        "spark.executor.cores": "1", "spark.executor.memory": "512m",
        "spark.task.maxFailures": "8", "spark.executorEnv.PYTHONPATH": str(REPO_ROOT),
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.dstl.stateStore.localDir": local_dir})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def cluster_driver(master: str, inputs: str, checkpoint: str, local_dir: str) -> None:
    """The driver of the worker-loss test, run as `python -m tests.support.spark ...`:
    prints one line per committed batch."""
    from pyspark_dstl.spark import stateful

    spark = cluster_session(master, "dstl-cluster-test", local_dir)
    stream = (stateful(file_stream(spark, Path(inputs))).group_by("user")
              .process(CountProcessor(), COUNT_SCHEMA, checkpoint_location=checkpoint, partitions=4)
              .on_progress(lambda p: print(f"committed batch {p.batch_id}", flush=True)))
    stream.start(trigger={"availableNow": True}).awaitTermination()
    import json

    print("state " + json.dumps(stored_counts(spark, checkpoint)), flush=True)
    spark.stop()


if __name__ == "__main__":
    cluster_driver(*sys.argv[1:5])


class FailOnKeyProcessor(StatefulProcessor):
    """Counts like CountProcessor but raises ValueError on the key "user-3"."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count")

    def handle_input_rows(self, key: tuple[Any, ...], rows: Any) -> Any:
        if key[0] == "user-3":
            raise ValueError("bad value for user-3")
        total = self.count.get(0) + sum(len(frame) for frame in rows)
        self.count.update(total)
        yield (key[0], total)


class WrongOutputTypeProcessor(StatefulProcessor):
    """Yields a string for the long output column "count"."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handle_input_rows(self, key: tuple[Any, ...], rows: Any) -> Any:
        yield (key[0], "not a number")
