"""A class data archive for the tests' JVMs: Spark's classes loaded once, mapped by every JVM.

A test session starts dozens of JVMs (the shared sessions, each kill test's processes, the
benchmark scripts' quick runs, the standalone daemons), and a fresh Spark JVM spends about half
of its start-up CPU loading and verifying classes. Java's application class data sharing keeps
them, parsed and verified, in an archive file; a JVM given the archive maps it instead (a
session's start took 3.6 s of JVM CPU instead of 6.5 here). The archive is made by one JVM
that runs what the tests run (a batch job, PySpark's own transformWithState, the switch) and
writes the classes it loaded at exit. It is a cache: keyed by the Java runtime and Spark's jars,
written to a temporary name and renamed into place, used only where it exists
(tests/conftest.py), and a JVM that cannot use it (another class path) runs without it, its
warning off. Nothing a test checks depends on it.

    .venv/bin/python -m tests.support.jvm_archive     # make it (scripts/run_tests.sh does)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.paths import JVM_CACHE, make_cached, spark_jars

# The flag the shared session of a test process leaves out: it lives for the whole run and its
# hundreds of batches, where the optimizing compiler pays for its warm-up (the chained
# comparisons, one file, took 17% less time with it).
CLIENT_COMPILER_ONLY = "-XX:TieredStopAtLevel=1"
# Most of the tests' JVMs are short-lived (one per kill test, a benchmark's quick run, the
# standalone daemons, the Connect server): the client compiler alone and the serial collector
# about halve the CPU a JVM spends starting and warming up on 2 cores.
TEST_JVM_OPTIONS = f"{CLIENT_COMPILER_ONLY} -XX:+UseSerialGC"
KEPT = 4  # archives kept in the cache (about 190 MiB each)
JAVA_OPTION_VARIABLES = ("JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS")
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a JVM the archive does not fit says nothing


@functools.cache  # one `java -version` per process: conftest and each session's start ask
def jvm_options_for_tests() -> str:
    """The options of every JVM a test starts: TEST_JVM_OPTIONS, and the class archive of
    this Java runtime and these Spark jars if it was made."""
    try:
        path = archive_path()
    except OSError:  # no java on the path: the tests that need one say so themselves
        return TEST_JVM_OPTIONS
    return f"{TEST_JVM_OPTIONS} {use_options(path)}" if path.is_file() else TEST_JVM_OPTIONS


@contextlib.contextmanager
def long_lived_jvm() -> Iterator[None]:
    """A JVM started in the block (the test process's shared session) may use the optimizing
    compiler; JDK_JAVA_OPTIONS set outside the tests is left as it is."""
    ours = jvm_options_for_tests()
    if os.environ.get("JDK_JAVA_OPTIONS") != ours:
        yield
        return
    os.environ["JDK_JAVA_OPTIONS"] = " ".join(ours.replace(CLIENT_COMPILER_ONLY, "").split())
    try:
        yield
    finally:
        os.environ["JDK_JAVA_OPTIONS"] = ours


def archive_path() -> Path:
    """Where the archive of this Java runtime and these Spark jars lives (made or not)."""
    quiet = {k: v for k, v in os.environ.items() if k not in JAVA_OPTION_VARIABLES}
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False,
                          env=quiet)  # the launcher would name the options in the key
    jars = spark_jars()
    listing = sorted(f"{p.name}:{p.stat().st_size}" for p in jars.glob("*.jar"))
    key = hashlib.sha256("\n".join([java.stderr, str(jars), *listing]).encode()).hexdigest()
    return JVM_CACHE / f"spark-classes-{key[:16]}.jsa"


def use_options(path: Path) -> str:
    """The JVM options that map `path` (quietly skipped by a JVM it does not fit)."""
    return f"-XX:SharedArchiveFile={path} -Xshare:auto {QUIET}"


def make_archive(path: Path) -> None:
    """Run the archiving job in a JVM that writes the classes it loaded at exit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        partial = Path(scratch) / "partial.jsa"
        env = {**os.environ,
               "JDK_JAVA_OPTIONS": f"{TEST_JVM_OPTIONS} -XX:ArchiveClassesAtExit={partial} "
                                   f"{QUIET}"}
        run = subprocess.run([sys.executable, "-m", "tests.support.jvm_archive", "--job",
                              scratch], env=env, capture_output=True, text=True, check=False,
                             timeout=600)
        if run.returncode != 0 or not partial.is_file():
            raise RuntimeError(f"the JVM class archive job failed ({run.returncode}): "
                               f"{run.stderr[-2000:]}")
        os.replace(partial, path)
    _prune(path.parent)


def _prune(cache: Path) -> None:
    """Keep the KEPT newest archives: each checkout's environment has its own (the archive
    names Spark's jars by path), and a clone per CI run would otherwise leave one each. A JVM
    mapping a removed archive keeps its pages."""
    made = sorted(cache.glob("spark-classes-*.jsa"), key=lambda p: p.stat().st_mtime,
                  reverse=True)
    for old in made[KEPT:]:
        old.unlink(missing_ok=True)


def _job(workdir: Path) -> None:
    """What the tests' JVMs load: a batch job, a streaming query on PySpark's own
    transformWithState (RocksDB state), the same query on the switch."""
    import pandas as pd

    import pyspark_dstl
    from tests.support.compat_processors import RunningCountPandas
    from tests.support.compat_runs import write_inputs
    from tests.support.spark import build_session
    from tests.support.tws_compare import PYSPARK_STATE_SETTINGS

    spark = build_session(extra={"spark.dstl.stateStore.localDir": str(workdir / "local"),
                                 **PYSPARK_STATE_SETTINGS})
    spark.range(100).selectExpr("id % 3 AS k").groupBy("k").count().collect()
    write_inputs(workdir / "in", [pd.DataFrame({"user": ["a", "b", "a"],
                                                "page": ["x", "y", "z"]})])
    for name, switch in (("pyspark", False), ("dstl", True)):
        if switch:
            pyspark_dstl.install()
        frame = (spark.readStream.schema("user string, page string")
                 .parquet(str(workdir / "in")).groupBy("user")
                 .transformWithStateInPandas(RunningCountPandas(), "user string, count long",
                                             "Update", "None"))
        query = (frame.writeStream.format("parquet").outputMode("append")
                 .option("checkpointLocation", str(workdir / name / "checkpoint"))
                 .trigger(availableNow=True).start(str(workdir / name / "out")))
        query.awaitTermination()
        spark.read.parquet(str(workdir / name / "out")).collect()
    pyspark_dstl.uninstall()
    spark.stop()


def main() -> None:
    if sys.argv[1:2] == ["--job"]:
        _job(Path(sys.argv[2]))
        return
    make_cached(archive_path(), make_archive, "JVM class archive")


if __name__ == "__main__":
    main()
