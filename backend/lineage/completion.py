"""Which attempts are checkpoints: only those whose store commit completed.

A commit's files carry a header; those of its last upload carry a FinalMark naming every SQN
the commit's change sets have (rules.py). An attempt that aborted or crashed after early
uploads has files, but none with a FinalMark, or not every SQN the mark names: it is not a
checkpoint, and loading it by (version, unique id) is refused. Files written before the marks
existed have no "commit" key at all (LEGACY) and are taken as complete, as they always were.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from pyspark_dstl.backend.backend_errors import UncommittedAttemptError
from pyspark_dstl.backend.lineage.naming import checkpoint_label
from pyspark_dstl.backend.lineage.rules import LEGACY, HeaderMeta

COMMITTED = "committed"
UNCOMMITTED = "uncommitted"


@dataclass(frozen=True)
class AttemptStatus:
    """What the files of one attempt (version, unique id) say about its commit."""

    state: str  # COMMITTED, UNCOMMITTED or LEGACY (complete as far as anyone can tell)
    reason: str = ""

    @property
    def is_checkpoint(self) -> bool:
        return self.state != UNCOMMITTED


def status_from_header(meta: HeaderMeta, path: str) -> AttemptStatus:
    """The status as far as the newest file's header tells (whether every SQN the mark
    names is there needs the files themselves: see status_from_files)."""
    if meta.completion == LEGACY:
        return AttemptStatus(LEGACY, "written before completion marks")
    if meta.final is None:
        return AttemptStatus(UNCOMMITTED, f"its newest file {path!r} is an early upload; no "
                                          f"upload of it says its commit completed")
    return AttemptStatus(COMMITTED)


def status_from_files(meta: HeaderMeta, path: str, sqns: Collection[int]) -> AttemptStatus:
    """The status given the newest file's header and every SQN the attempt's files hold."""
    status = status_from_header(meta, path)
    final = meta.final
    if final is None:
        return status
    wanted = range(final.from_sqn, final.to_sqn)
    if len(sqns) != len(wanted) or set(sqns) != set(wanted):
        missing = sorted(set(wanted) - set(sqns))
        extra = sorted(set(sqns) - set(wanted))
        return AttemptStatus(UNCOMMITTED, f"its last upload {path!r} names change sets "
                                          f"[{final.from_sqn}, {final.to_sqn}) but its files "
                                          f"lack {missing[:5]} and hold {extra[:5]} besides")
    return status


def require_checkpoint(store_id: str, version: int, unique_id: str,
                       status: AttemptStatus) -> None:
    """UncommittedAttemptError naming the attempt unless its commit completed."""
    if not status.is_checkpoint:
        raise UncommittedAttemptError(
            f"store {store_id!r}: attempt {checkpoint_label(version, unique_id)} never "
            f"completed its commit ({status.reason}); it aborted or crashed and is not a "
            f"checkpoint")
