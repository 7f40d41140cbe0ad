"""The local side of a snapshot: a RocksDB checkpoint (hard links) and opening a restored DB."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from rocksdict import Checkpoint, Options, Rdict

from pyspark_dstl.materializer.materializer_errors import MaterializerError
from pyspark_dstl.materializer.names import check_local_name

DEFAULT_CF = "default"


@dataclass(frozen=True)
class LinkCopy:
    """A consistent copy of a DB's files; SSTs are hard links, so it costs no data copy."""

    directory: str
    column_families: tuple[str, ...]
    key_counts: dict[str, int] = field(default_factory=dict)

    def file_names(self) -> list[str]:
        names = sorted(os.listdir(self.directory))
        for name in names:
            full = os.path.join(self.directory, name)
            if not os.path.isfile(full) or not check_local_name(name):
                raise MaterializerError(f"unexpected entry {full!r} in a RocksDB checkpoint")
        return names

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def owned_link_copy_root(root: str) -> str:
    """A checkpoint folder for this process, after removing folders of processes that died.

    Several processes may share one local directory (Python workers on one host), so each
    gets `<root>/<pid>-<random>`; a leftover of a crashed process pins hard-linked SSTs.
    """
    os.makedirs(root, exist_ok=True)
    for name in os.listdir(root):
        pid_text = name.split("-", 1)[0]
        if pid_text.isdigit() and not _alive(int(pid_text)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    mine = os.path.join(root, f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
    os.makedirs(mine)
    return mine


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def take_link_copy(db: Rdict, directory: str) -> LinkCopy:
    """Flush the memtable and hard-link the DB's live files into `directory` (must not exist).

    Runs in the caller's thread at a commit boundary: no writes may happen meanwhile.
    """
    if os.path.exists(directory):
        raise MaterializerError(f"checkpoint directory {directory!r} already exists")
    os.makedirs(os.path.dirname(directory) or ".", exist_ok=True)
    try:
        Checkpoint(db).create_checkpoint(directory)
        families = tuple(Rdict.list_cf(directory, Options(raw_mode=True)))
        counts = {name: _estimate_keys(db, name) for name in families}
    except Exception as exc:
        shutil.rmtree(directory, ignore_errors=True)
        raise MaterializerError(f"RocksDB checkpoint into {directory!r} failed: {exc}") from exc
    return LinkCopy(directory, families, counts)


def _estimate_keys(db: Rdict, family: str) -> int:
    handle = db if family == DEFAULT_CF else db.get_column_family(family)
    try:
        value = handle.property_int_value("rocksdb.estimate-num-keys")
    finally:
        del handle  # a live column-family handle would keep the DB lock after db.close()
    return int(value or 0)


def open_db(path: str, column_families: Iterable[str] | None = None) -> Rdict:
    """Open a restored DB in raw mode with every column family (listed from disk if None)."""
    families = (list(column_families) if column_families is not None
                else Rdict.list_cf(path, Options(raw_mode=True)))
    extra = {name: Options(raw_mode=True) for name in families if name != DEFAULT_CF}
    try:
        return Rdict(path, Options(raw_mode=True), column_families=extra or None)
    except Exception as exc:
        raise MaterializerError(f"cannot open RocksDB at {path!r}: {exc}") from exc
