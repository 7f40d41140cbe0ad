"""Who a process is, precisely enough to tell from the same host that it is gone.

A run holding a checkpoint records its ProcessIdentity. Another process on the same host (same
host name, same boot, same PID namespace) can then tell for certain that the holder died: its
PID no longer exists, or belongs to a process started at another time (PID reuse). Anywhere
else nothing is known for certain, and the lease decides (see lineage/fencing.py).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

_BOOT_ID = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True)
class ProcessIdentity:
    host: str
    pid: int
    boot_id: str | None = None  # None where /proc does not tell
    pid_namespace: int | None = None
    started: int | None = None  # start time in clock ticks since boot

    @classmethod
    def current(cls) -> ProcessIdentity:
        pid = os.getpid()
        return cls(socket.gethostname(), pid, _boot_id(), _pid_namespace(), _start_ticks(pid))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcessIdentity:
        def optional(name: str, kind: type) -> Any:
            value = data.get(name)
            return value if isinstance(value, kind) and not isinstance(value, bool) else None

        host, pid = data.get("host"), data.get("pid")
        if not isinstance(host, str) or isinstance(pid, bool) or not isinstance(pid, int):
            raise ValueError("a process identity needs a host name and a PID")
        return cls(host, pid, optional("boot_id", str), optional("pid_namespace", int),
                   optional("started", int))

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def is_this_process(identity: ProcessIdentity) -> bool:
    return identity == ProcessIdentity.current()


def known_dead(identity: ProcessIdentity) -> bool:
    """True only when this host can see for certain that the process no longer runs."""
    here = ProcessIdentity.current()
    if (identity.host, identity.boot_id, identity.pid_namespace) != \
            (here.host, here.boot_id, here.pid_namespace) \
            or identity.boot_id is None or identity.pid_namespace is None \
            or identity.started is None:
        return False
    started = _start_ticks(identity.pid)
    return started is None or started != identity.started or _exited(identity.pid)


def _boot_id() -> str | None:
    try:
        with open(_BOOT_ID) as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def _pid_namespace() -> int | None:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _stat_fields(pid: int) -> list[bytes]:
    """/proc/<pid>/stat from field 3 (state) on; empty when the process does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return []
    return stat[stat.rfind(b")") + 2:].split()  # after "pid (comm) "


def _start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat; None when the process does not exist (or no /proc)."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _exited(pid: int) -> bool:
    """A zombie (exited, not yet reaped by its parent) runs no code any more."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] in (b"Z", b"X")
