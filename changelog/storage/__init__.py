"""Storage backends behind one URL: file://, memory://, s3:// natively, other fsspec protocols."""

from __future__ import annotations

import os
from collections.abc import Callable
from urllib.parse import unquote, urlsplit

import fsspec

from pyspark_dstl.changelog.config import ChangelogOptions
from pyspark_dstl.changelog.errors import StorageError, UnsupportedStorageError
from pyspark_dstl.changelog.storage.base import (
    ObjectInfo,
    ObjectStore,
    check_key,
    join_key,
    md5_hex,
)
from pyspark_dstl.changelog.storage.fsspec_store import FsspecStore
from pyspark_dstl.changelog.storage.local import LocalStore
from pyspark_dstl.changelog.storage.memory import MemoryStore
from pyspark_dstl.changelog.storage.s3 import S3Store

__all__ = [
    "FsspecStore",
    "LocalStore",
    "MemoryStore",
    "ObjectInfo",
    "ObjectStore",
    "S3Store",
    "check_key",
    "join_key",
    "md5_hex",
    "open_storage",
]

S3_SCHEMES = ("s3", "s3a")
_Factory = Callable[[str, str], ObjectStore]


def open_storage(url: str, options: ChangelogOptions) -> ObjectStore:
    """The store for `url`; an unknown scheme raises UnsupportedStorageError naming the URL."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "":
        return LocalStore(_local_path(url, url))
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise UnsupportedStorageError(
                f"storage URL {url!r}: file URLs naming another host are not supported")
        return LocalStore(_local_path(url, unquote(parts.path)))
    if scheme == "memory":
        return _named(url, parts.netloc, parts.path, MemoryStore)
    if scheme in S3_SCHEMES:
        return _named(url, parts.netloc, parts.path,
                      lambda bucket, prefix: S3Store(bucket, prefix, options))
    return _open_fsspec(url, scheme)


def _local_path(url: str, path: str) -> str:
    """`path` unless a part of it is '..' or empty inside it (the documented refusal: a root
    must not depend on how the path is normalised)."""
    parts = path.replace(os.sep, "/").rstrip("/").split("/")
    inner = parts[1:] if parts and parts[0] == "" else parts
    if ".." in parts or "" in inner:
        raise UnsupportedStorageError(f"storage URL {url!r}: invalid path: a '..' or empty part")
    return path


def _named(url: str, name: str, path: str, make: _Factory) -> ObjectStore:
    if not name:
        raise UnsupportedStorageError(f"storage URL {url!r}: missing the name after '//'")
    try:
        return make(name, path.strip("/"))
    except StorageError as exc:
        raise UnsupportedStorageError(f"storage URL {url!r}: invalid path: {exc}") from exc


def _open_fsspec(url: str, scheme: str) -> ObjectStore:
    try:
        fsspec.get_filesystem_class(scheme)
    except (ValueError, ImportError) as exc:
        raise UnsupportedStorageError(
            f"storage URL {url!r}: unsupported scheme {scheme!r} ({exc})") from exc
    try:
        fs, root = fsspec.core.url_to_fs(url)
    except Exception as exc:
        raise UnsupportedStorageError(
            f"storage URL {url!r}: cannot open the {scheme!r} file system: {exc}") from exc
    return FsspecStore(fs, root, url)
