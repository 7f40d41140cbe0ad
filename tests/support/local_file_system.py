"""Hadoop's local file system for the tests' JVMs, with permissions set inside the JVM.

Without Hadoop's native library (the pyspark package has none), Hadoop's local file system
sets the permission bits of every file it creates by starting a `chmod` process: Spark's
offsets, commits and state files, each with its checksum file, the sinks' files and logs. A
test that runs a query on both engines started about 250 of them here, some 10 ms of CPU each
with the JVM's spawn helper. `java/InProcessChmodLocalFileSystem.java` is Hadoop's checksummed
local file system with the same bits set through java.nio, as the native library would; the
files written are the same. It is compiled once per machine into a cache (like the class
archive, tests/support/jvm_archive.py), put at the end of every test JVM's class path
(SPARK_DIST_CLASSPATH, which Spark's launcher appends, so the class archive still fits) and
named by the tests' sessions (`spark.hadoop.fs.file.impl`). Without `javac` the tests run on
Hadoop's own class. The benchmarks keep Hadoop's default: they measure what users run.

    .venv/bin/python -m tests.support.local_file_system     # make it (scripts/run_tests.sh does)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from tests.support.paths import JVM_CACHE, make_cached, spark_jars

SOURCE = Path(__file__).parent / "java" / "InProcessChmodLocalFileSystem.java"
CLASS_NAME = "dstl.tests.InProcessChmodLocalFileSystem"
FILE_SYSTEM_SETTING = "spark.hadoop.fs.file.impl"
CLASS_PATH_VARIABLE = "SPARK_DIST_CLASSPATH"


def jar_path() -> Path:
    """Where the compiled class lives (made or not): named by its source."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    return JVM_CACHE / f"local-file-system-{digest}.jar"


def make_jar(path: Path) -> None:
    """Compile the class against the Hadoop client of Spark's jars (Java 17 byte code, so any
    supported PySpark's JVM loads it) and write the jar under a temporary name first."""
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac (a JDK 17) is not on the PATH: install one to make "
                           f"{path.name}; the tests run without it")
    hadoop = sorted(spark_jars().glob("hadoop-client-api-*.jar"))
    if not hadoop:
        raise RuntimeError(f"no hadoop-client-api jar in {spark_jars()}: the pyspark "
                           "installation is incomplete")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        classes = Path(scratch) / "classes"
        run = subprocess.run([javac, "--release", "17", "-nowarn", "-cp", str(hadoop[-1]),
                              "-d", str(classes), str(SOURCE)],
                             capture_output=True, text=True, check=False, timeout=300)
        if run.returncode != 0:
            raise RuntimeError(f"javac failed on {SOURCE.name}: {run.stderr[-2000:]}")
        partial = Path(scratch) / "partial.jar"
        with zipfile.ZipFile(partial, "w") as jar:
            for compiled in sorted(classes.rglob("*.class")):
                jar.write(compiled, compiled.relative_to(classes).as_posix())
        os.replace(partial, path)
    for old in path.parent.glob("local-file-system-*.jar"):
        if old != path:
            old.unlink(missing_ok=True)


def put_on_class_path() -> None:
    """Append the jar, if made, to the class path of every JVM this process starts from now
    on (the sessions, the standalone daemons and their executors, the Connect server)."""
    path = jar_path()
    entries = [e for e in os.environ.get(CLASS_PATH_VARIABLE, "").split(os.pathsep) if e]
    if path.is_file() and str(path) not in entries:
        os.environ[CLASS_PATH_VARIABLE] = os.pathsep.join([*entries, str(path)])


def file_system_settings() -> dict[str, str]:
    """The session setting that selects the class, where the JVMs this process starts have
    it on their class path (`put_on_class_path`, inherited by the tests' subprocesses)."""
    entries = os.environ.get(CLASS_PATH_VARIABLE, "").split(os.pathsep)
    return {FILE_SYSTEM_SETTING: CLASS_NAME} if str(jar_path()) in entries else {}


def main() -> None:
    make_cached(jar_path(), make_jar, "in-process chmod for Hadoop's local file system")


if __name__ == "__main__":
    main()
