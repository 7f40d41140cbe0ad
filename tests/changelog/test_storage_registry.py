"""open_storage picks a store by URL scheme from STORAGE_FACTORIES, fsspec for the rest, and
each store gets only the settings it needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import SplitResult

import pytest

from pyspark_dstl.changelog.changelog_errors import UnsupportedStorageError
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.storage import (
    STORAGE_FACTORIES,
    ConnectionNeeds,
    FsspecStorage,
    MemoryStorage,
    NonAtomicStorageWarning,
    S3Storage,
    Storage,
    StorageSettings,
    open_storage,
    register_storage,
)


def open_as_memory(url: str, parts: SplitResult, storage: StorageSettings,
                   needs: ConnectionNeeds) -> Storage:
    return MemoryStorage(f"registered-{parts.netloc}")


def test_a_registered_scheme_opens_the_store_of_its_factory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(STORAGE_FACTORIES, "scratch", open_as_memory)
    try:
        store = open_storage("scratch://space/x", ChangelogSettings())
        assert isinstance(store, MemoryStorage)
        assert store.root_url == "memory://registered-space"
    finally:
        MemoryStorage.drop("registered-space")


def test_register_storage_opens_a_new_scheme_with_its_factory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pyspark_dstl.changelog.storage.STORAGE_FACTORIES",
                        dict(STORAGE_FACTORIES))
    register_storage("scratch://", open_as_memory)
    store = open_storage("Scratch://space/x", ChangelogSettings())
    assert isinstance(store, MemoryStorage)
    assert store.root_url == "memory://registered-space"


def test_register_storage_refuses_a_taken_scheme_unless_asked_to_replace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pyspark_dstl.changelog.storage.STORAGE_FACTORIES",
                        dict(STORAGE_FACTORIES))
    with pytest.raises(UnsupportedStorageError, match=r"scheme 's3' already opens with .*"
                                                      r"replace=True"):
        register_storage("s3", open_as_memory)
    register_storage("s3", open_as_memory, replace=True)
    assert isinstance(open_storage("s3://bucket/x", ChangelogSettings()), MemoryStorage)


def test_register_storage_refuses_what_is_not_a_scheme() -> None:
    with pytest.raises(UnsupportedStorageError, match="not a URL scheme"):
        register_storage("s3 bucket", open_as_memory)


def test_register_storage_is_exported_with_the_storage_interface() -> None:
    import pyspark_dstl

    assert pyspark_dstl.register_storage is register_storage
    assert pyspark_dstl.Storage is Storage


def test_a_scheme_fsspec_knows_needs_no_entry(tmp_path: Path) -> None:
    assert "local" not in STORAGE_FACTORIES
    with pytest.warns(NonAtomicStorageWarning):
        store = open_storage(f"local://{tmp_path}", ChangelogSettings())
    assert isinstance(store, FsspecStorage)


def test_a_scheme_nobody_knows_fails_naming_the_url() -> None:
    with pytest.raises(UnsupportedStorageError, match=r"^storage URL 'nope://b/p': "):
        open_storage("nope://b/p", ChangelogSettings())


def test_the_s3_store_gets_the_storage_options_and_the_connection_needs_only() -> None:
    storage = StorageSettings(s3_region="eu-west-1", s3_addressing_style="path")
    options = ChangelogSettings(storage=storage, attempt_timeout=3.0, max_concurrent_uploads=2,
                               hedge_max_hedges=1, read_parallelism=4)
    store = open_storage("s3://bucket/prefix", options)
    assert isinstance(store, S3Storage)
    assert store.storage is storage
    assert store.needs == ConnectionNeeds(request_timeout=3.0, connections=(1 + 1) * 2 + 4 + 4)
    assert not hasattr(store, "options")


def test_max_pool_connections_replaces_what_the_changelog_wants() -> None:
    wanted = ChangelogSettings().connection_needs.connections
    assert ChangelogSettings().pool_connections == wanted
    pinned = ChangelogSettings(storage=StorageSettings(s3_max_pool_connections=3))
    assert pinned.pool_connections == 3


def test_s3_settings_keep_their_changelog_keys() -> None:
    options = ChangelogSettings.from_mapping({"spark.dstl.changelog.s3.region": "eu-west-1",
                                          "spark.dstl.changelog.s3.maxPoolConnections": "7"})
    assert options.storage == StorageSettings(s3_region="eu-west-1", s3_max_pool_connections=7)


def test_local_storage_never_imports_the_s3_client_libraries(tmp_path: Path) -> None:
    """Python workers and the CLI open file:// roots far more often than they start; botocore
    and aiohttp cost them a fifth of a second each time, so s3:// loads them on first use."""
    script = (
        "import sys\n"
        "from pyspark_dstl.spark.readers.progress_source import DstlProgressSource\n"
        "from pyspark_dstl.changelog.changelog_settings import ChangelogSettings\n"
        "from pyspark_dstl.changelog.storage import open_storage\n"
        f"open_storage({tmp_path.as_uri()!r}, ChangelogSettings())\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('botocore', 'aiobotocore', 'aiohttp'))\n"
        "assert not loaded, loaded\n"
        "from pyspark_dstl.changelog.storage import S3Storage\n"
        "assert 'botocore' in sys.modules\n")
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                               timeout=120)
    assert completed.returncode == 0, completed.stderr
