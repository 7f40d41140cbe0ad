"""Local files that must survive a crash: a new name is durable only once its directory is."""

from __future__ import annotations

import os


def sync_directory(path: str | os.PathLike[str]) -> None:
    """fsync the directory itself, so the entries just created, renamed or removed in it are
    durable, not only the bytes of the files they name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
