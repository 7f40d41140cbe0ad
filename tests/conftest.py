"""Shared fixtures: moto server + fault proxy per session, a fresh bucket or store per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.storage import Storage, open_storage
from pyspark_dstl.changelog.storage.memory import MemoryStorage
from pyspark_dstl.core.loop import EventLoopThread
from tests.support import FaultProxy, MotoServer, S3Env, make_s3_env
from tests.support.connect import ConnectServer
from tests.support.jvm_archive import jvm_options_for_tests, long_lived_jvm
from tests.support.local_file_system import put_on_class_path

# Every JVM started from here on takes the tests' JVM options (the client compiler, the serial
# collector, the class archive if made: tests/support/jvm_archive.py), the shared session's
# with the optimizing compiler too (`long_lived_jvm`); a value set outside is kept.
os.environ.setdefault("JDK_JAVA_OPTIONS", jvm_options_for_tests())
# ... and Hadoop's local file system sets permissions without a process per file, if its class
# was made (tests/support/local_file_system.py)
put_on_class_path()
# numpy's OpenBLAS starts a thread per core in every process that imports it, and they spin
# for a while: the tests' Python workers and Spark's short-lived Python helpers do no linear
# algebra
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# the Python processes of the tests' Spark freeze after the daemon's collections, whichever
# operator they run (tests/support/worker_site/sitecustomize.py)
os.environ.setdefault("DSTL_TESTS_FREEZE_AFTER_COLLECT", "1")

STORAGE_KINDS = ["memory", "file", "s3"]
S3_FIXTURES = frozenset({"s3", "moto_server", "fault_proxy"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tiers: a test that reaches the S3 server (by fixture or as the "s3" case of a storage
    parameter) is marked `s3`, so the fast tier (pyproject's default marker expression) can
    leave it out; `scripts/run_tests.sh` runs every tier."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        cases = set(callspec.id.split("-")) if callspec is not None else set()
        if "s3" in cases or S3_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.s3)
    _longest_files_first(items)


def _longest_files_first(items: list[pytest.Item]) -> None:
    """Files with slow tests first, then files with Spark tests, then the rest, each file's
    tests in their own order: `scripts/run_tests.sh` hands whole files to two processes
    (pytest-xdist, --dist loadfile), and a long file handed out last would run alone."""
    rank: dict[str, int] = {}
    for item in items:
        file_rank = (0 if item.get_closest_marker("slow") else
                     1 if item.get_closest_marker("spark") else 2)
        rank[item.nodeid.split("::")[0]] = min(rank.get(item.nodeid.split("::")[0], 2),
                                               file_rank)
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    server = MotoServer().start()
    server.reset()  # moto's state is process-global: start the session from nothing
    yield server
    server.stop()


@pytest.fixture(scope="session")
def fault_proxy(moto_server: MotoServer) -> Iterator[FaultProxy]:
    proxy = FaultProxy(moto_server.endpoint_url).start()
    yield proxy
    proxy.stop()


@pytest.fixture
def s3(moto_server: MotoServer, fault_proxy: FaultProxy) -> Iterator[S3Env]:
    fault_proxy.reset()
    fault_proxy.set_seed(0)
    yield make_s3_env(moto_server, fault_proxy)
    fault_proxy.reset()


@pytest.fixture(params=STORAGE_KINDS, ids=STORAGE_KINDS)
def storage_url(request: pytest.FixtureRequest,
                tmp_path: Path) -> Iterator[tuple[str, ChangelogSettings]]:
    kind = request.param
    if kind == "memory":
        name = f"t-{uuid.uuid4().hex}"
        yield f"memory://{name}", ChangelogSettings()
        MemoryStorage.drop(name)
    elif kind == "file":
        yield (tmp_path / "store").as_uri(), ChangelogSettings()
    else:
        env: S3Env = request.getfixturevalue("s3")
        yield env.url, env.options


@pytest.fixture
async def store(storage_url: tuple[str, ChangelogSettings]) -> AsyncIterator[Storage]:
    url, options = storage_url
    opened = open_storage(url, options)
    yield opened
    await opened.close()


@pytest.fixture
def loop_thread() -> Iterator[EventLoopThread]:
    thread = EventLoopThread(name="test-loop")
    yield thread
    thread.close()


# ---- Spark (owned by the backend/spark helper; keep this block at the end) --------------------


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The one SparkSession of the test session (see tests/support/spark.py); executors keep
    their local store copies in a session temporary directory."""
    from tests.support.spark import build_session

    local_dir = tmp_path_factory.mktemp("dstl-local")
    with long_lived_jvm():
        session = build_session(extra={"spark.dstl.stateStore.localDir": str(local_dir)})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def reference(spark: object, tmp_path_factory: pytest.TempPathFactory) -> object:
    """PySpark's own run of each side-by-side scenario, made once per session and shared."""
    from tests.support.tws_compare import ReferenceRuns

    return ReferenceRuns(spark, tmp_path_factory.mktemp("pyspark-reference"))


@pytest.fixture
def dropin(spark: object) -> Iterator[object]:
    """The shared session with the drop-in switch on for this test only."""
    import pyspark_dstl

    pyspark_dstl.install()
    try:
        yield spark
    finally:
        pyspark_dstl.uninstall()
        for query in spark.streams.active:  # type: ignore[attr-defined]
            query.stop()


# ---- end of the Spark block -------------------------------------------------------------------


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A Spark Connect server on loopback for the tests of one module (its own JVM)."""
    server = ConnectServer(tmp_path_factory.mktemp("connect")).start()
    try:
        yield server
    finally:
        server.stop()
