"""StateBackend: the per-process owner of storages, materializers and providers.

One ChangelogService and one Materializer per checkpoint location, created on first use, so all
stores of a location share one upload scheduler (one file per drain and directory), one connection
pool and one snapshot worker pool. Closing it waits for uploads and snapshots in flight.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from types import TracebackType

from pyspark_dstl.backend.backend_errors import StateStoreClosedError
from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.engines.rocksdb import RocksDBSettings
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.lineage.context import LocationContext
from pyspark_dstl.backend.lineage.naming import make_store_id
from pyspark_dstl.backend.local.dirs import location_dir
from pyspark_dstl.backend.store.api import StateStoreProvider
from pyspark_dstl.backend.store.registry import load_provider_class
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.materializer.checksum import ChecksumCache
from pyspark_dstl.materializer.materializer import Materializer

MATERIALIZER_DIR = "materializer"


class StateBackend:
    def __init__(self, settings: BackendSettings | None = None, *,
                 checksums: ChecksumCache | None = None) -> None:
        """`checksums`: shared with another backend's materializers (see Materializer)."""
        self.settings = settings or BackendSettings()
        self._checksums = checksums
        self._provider_class = load_provider_class(self.settings.provider_class)
        self._rocksdb = RocksDBSettings.from_settings(self.settings)
        self._locations: dict[str, LocationContext] = {}
        self._providers: dict[tuple[str, str], StateStoreProvider] = {}
        self._lock = threading.Lock()
        self._closed = False

    def context(self, location: str) -> LocationContext:
        """The shared parts of checkpoint location `location` (a URL), created on first use."""
        with self._lock:
            self._check_open()
            context = self._locations.get(location)
            if context is None:
                context = self._open_location(location)
                self._locations[location] = context
            return context

    def _open_location(self, location: str) -> LocationContext:
        local_root = location_dir(self.settings.local_dir, location)
        storage = ChangelogService(location, self.settings.changelog)
        try:
            materializer = Materializer(storage, self.settings.materialization,
                                        os.path.join(local_root, MATERIALIZER_DIR),
                                        self._checksums)
        except BaseException:
            storage.close()
            raise
        return LocationContext(location, storage, materializer, self.settings, local_root,
                               self._rocksdb)

    def provider(self, location: str, operator: str, partition: int) -> StateStoreProvider:
        """The provider of one store; the same object for the same store while open."""
        store_id = make_store_id(operator, partition)
        context = self.context(location)
        with self._lock:
            self._check_open()
            key = (location, store_id)
            provider = self._providers.get(key)
            if provider is None:
                provider = self._provider_class(context, store_id)
                self._providers[key] = provider
            return provider

    def release(self, location: str, operator: str, partition: int) -> None:
        """Close one store's provider (e.g. when a partition moves elsewhere)."""
        with self._lock:
            provider = self._providers.pop((location, make_store_id(operator, partition)),
                                           None)
        if provider is not None:
            provider.close()

    def commit_log(self, location: str) -> CommitLog:
        return CommitLog(self.context(location).storage)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            providers, self._providers = list(self._providers.values()), {}
            contexts, self._locations = list(self._locations.values()), {}
        errors: list[BaseException] = []
        for provider in providers:
            _collect(errors, provider.close)
        for context in contexts:
            _collect(errors, context.materializer.close)
            _collect(errors, context.storage.close)
        if errors:
            raise errors[0]

    def __enter__(self) -> StateBackend:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StateStoreClosedError("the state backend is closed")


def _collect(errors: list[BaseException], action: Callable[[], None]) -> None:
    try:
        action()
    except Exception as exc:  # keep closing the rest; the first error is re-raised
        errors.append(exc)
