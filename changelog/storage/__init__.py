"""Storage backends behind one URL: file://, memory://, s3:// natively, other fsspec protocols.

`STORAGE_FACTORIES` maps a URL scheme to the function that opens its store; a scheme not in it
goes to fsspec, and one fsspec does not know either fails naming the URL. A new backend is its
store class plus one entry: here, or from outside with `register_storage`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, unquote, urlsplit

import fsspec

from pyspark_dstl.changelog.changelog_errors import (
    NonAtomicStorageWarning,
    StorageError,
    UnsupportedStorageError,
)
from pyspark_dstl.changelog.storage.base import (
    ObjectInfo,
    Storage,
    check_key,
    join_key,
    md5_hex,
)
from pyspark_dstl.changelog.storage.fsspec_storage import FsspecStorage
from pyspark_dstl.changelog.storage.local import LocalStorage
from pyspark_dstl.changelog.storage.memory import MemoryStorage
from pyspark_dstl.changelog.storage.storage_settings import ConnectionNeeds, StorageSettings

if TYPE_CHECKING:
    from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
    from pyspark_dstl.changelog.storage.s3 import S3Storage

__all__ = [
    "STORAGE_FACTORIES",
    "ConnectionNeeds",
    "FsspecStorage",
    "LocalStorage",
    "MemoryStorage",
    "NonAtomicStorageWarning",
    "ObjectInfo",
    "S3Storage",
    "Storage",
    "StorageSettings",
    "StoreFactory",
    "check_key",
    "join_key",
    "md5_hex",
    "open_storage",
    "register_storage",
]

StoreFactory = Callable[[str, SplitResult, StorageSettings, ConnectionNeeds], Storage]
"""(url, its parts, connection settings, what the changelog asks of them) -> the storage."""


def open_storage(url: str, settings: ChangelogSettings) -> Storage:
    """The store for `url`; an unknown scheme raises UnsupportedStorageError naming the URL."""
    parts = urlsplit(url)
    factory = STORAGE_FACTORIES.get(parts.scheme.lower(), _open_fsspec)
    return factory(url, parts, settings.storage, settings.connection_needs)


def _open_path(url: str, parts: SplitResult, storage: StorageSettings,
               needs: ConnectionNeeds) -> Storage:
    return LocalStorage(_local_path(url, url))


def _open_file(url: str, parts: SplitResult, storage: StorageSettings,
               needs: ConnectionNeeds) -> Storage:
    if parts.netloc not in ("", "localhost"):
        raise UnsupportedStorageError(
            f"storage URL {url!r}: file URLs naming another host are not supported; write "
            f"file:///path (three slashes) for a local path, or use s3:// for shared storage")
    return LocalStorage(_local_path(url, unquote(parts.path)))


def _local_path(url: str, path: str) -> str:
    """`path` unless a part of it is '..' or empty inside it (the documented refusal: a root
    must not depend on how the path is normalised)."""
    parts = path.replace(os.sep, "/").rstrip("/").split("/")
    inner = parts[1:] if parts and parts[0] == "" else parts
    if ".." in parts or "" in inner:
        raise UnsupportedStorageError(f"storage URL {url!r}: invalid path: a '..' or empty "
                                      f"part; write the absolute path without them")
    return path


def _open_memory(url: str, parts: SplitResult, storage: StorageSettings,
                 needs: ConnectionNeeds) -> Storage:
    return _named(url, parts, MemoryStorage)


def _open_s3(url: str, parts: SplitResult, storage: StorageSettings,
             needs: ConnectionNeeds) -> Storage:
    from pyspark_dstl.changelog.storage.s3 import S3Storage  # botocore only when used

    return _named(url, parts, lambda bucket, prefix: S3Storage(bucket, prefix, storage, needs))


def __getattr__(name: str) -> object:
    """`S3Storage` on first use: its S3 client libraries take a fifth of a second to import,
    which every process that opens only local storage (Python workers, the CLI) would pay."""
    if name == "S3Storage":
        from pyspark_dstl.changelog.storage.s3 import S3Storage

        return S3Storage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _named(url: str, parts: SplitResult, make: Callable[[str, str], Storage]) -> Storage:
    """A store named after '//' (bucket, memory space) with an optional path prefix."""
    if not parts.netloc:
        raise UnsupportedStorageError(f"storage URL {url!r}: missing the name after '//'; write "
                                      f"{parts.scheme}://<bucket>/<prefix>")
    try:
        return make(parts.netloc, parts.path.strip("/"))
    except StorageError as exc:
        raise UnsupportedStorageError(f"storage URL {url!r}: invalid path: {exc}") from exc


def _open_fsspec(url: str, parts: SplitResult, storage: StorageSettings,
                 needs: ConnectionNeeds) -> Storage:
    scheme = parts.scheme.lower()
    try:
        fsspec.get_filesystem_class(scheme)
    except (ValueError, ImportError) as exc:
        raise UnsupportedStorageError(
            f"storage URL {url!r}: unsupported scheme {scheme!r}; use file:// or s3://, or "
            f"install the fsspec package for {scheme!r} ({exc})") from exc
    try:
        fs, root = fsspec.core.url_to_fs(url)
    except Exception as exc:
        raise UnsupportedStorageError(
            f"storage URL {url!r}: cannot open the {scheme!r} file system ({exc}); check the "
            f"URL and that package's credentials and settings") from exc
    return FsspecStorage(fs, root, url)


STORAGE_FACTORIES: dict[str, StoreFactory] = {
    "": _open_path,
    "file": _open_file,
    "memory": _open_memory,
    "s3": _open_s3,
    "s3a": _open_s3,
}


def register_storage(scheme: str, factory: StoreFactory, *, replace: bool = False) -> None:
    """Open `scheme://` URLs with `factory` from now on, in this process. Register it where the
    driver and every Python worker import it (the module of the query's processor, for
    example): a worker that lacks it opens the URL through fsspec or refuses it by name.
    A scheme already registered is refused unless `replace`, so that two packages cannot take
    one scheme from each other unnoticed."""
    key = scheme.lower().removesuffix("://")
    if not key or not key.replace("+", "").replace("-", "").replace(".", "").isalnum():
        raise UnsupportedStorageError(
            f"register_storage({scheme!r}): not a URL scheme; give it as 'name' or 'name://'")
    if key in STORAGE_FACTORIES and not replace:
        raise UnsupportedStorageError(
            f"register_storage({scheme!r}): scheme {key!r} already opens with "
            f"{getattr(STORAGE_FACTORIES[key], '__qualname__', STORAGE_FACTORIES[key])}; pass "
            f"replace=True to open it with another factory")
    STORAGE_FACTORIES[key] = factory
