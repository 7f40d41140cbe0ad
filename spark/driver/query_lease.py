"""The driver's hold on its checkpoint location (backend/fencing/lease.py) for the Spark
integration.

A query takes the location when it starts, before Spark runs anything, and holds it while it is
active; an operator used directly (`run_batch`, `execute`/`commit`) takes it at its first
batch. Every commit log entry and every cleanup goes through the lease, so a driver that
another run took over stops with FencedError before it writes or deletes anything.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.fencing.lease import HELD, CheckpointLease, acquire


class _QuerySettings(Protocol):
    @property
    def backend(self) -> BackendSettings: ...


class LeaseHolder(Protocol):
    """What a lease needs of its operator: the settings and the checkpoint's storage."""

    @property
    def settings(self) -> _QuerySettings: ...

    def _storage(self) -> Any: ...

_leases: weakref.WeakKeyDictionary[LeaseHolder, CheckpointLease] = weakref.WeakKeyDictionary()


def hold(operator: LeaseHolder) -> CheckpointLease:
    """The operator's lease, taken at its first use. One that was taken over or let go is
    returned as it is: its `check` raises FencedError, so a fenced run never writes again."""
    lease = _leases.get(operator)
    if lease is None:
        lease = _take(operator)
    return lease


def start_query(operator: LeaseHolder) -> CheckpointLease:
    """A query starts: take the location anew (CheckpointHeldError while another run holds it,
    including a query of this process that is still active)."""
    lease = _leases.get(operator)
    if lease is not None and lease.state == HELD and not lease.busy():
        lease.release("its operator starts a new query")
    return _take(operator)


def attach_query(operator: LeaseHolder, query: Any) -> None:
    """The run lasts as long as the query: busy while active, let go once it ends."""
    lease = _leases.get(operator)
    if lease is not None:
        lease.busy_while(lambda: _active(query))


def end_query(operator: LeaseHolder, query: Any) -> None:
    """The query was seen to end (finished, stopped or failed): let go now, while this
    process can still write the end file, rather than at the next renewal, which may come
    when the interpreter is already shutting down its threads."""
    lease = _leases.get(operator)
    if lease is not None and lease.state == HELD and not _active(query):
        lease.release("its query ended")


def abandon_query(operator: LeaseHolder) -> None:
    """The query did not start: let go at once."""
    lease = _leases.get(operator)
    if lease is not None and lease.state == HELD:
        lease.release("its query failed to start")


def _take(operator: LeaseHolder) -> CheckpointLease:
    storage = operator._storage()
    lease = acquire(storage, operator.settings.backend.fencing)
    _leases[operator] = lease
    return lease


def _active(query: Any) -> bool:
    try:
        return bool(query.isActive)
    except Exception:  # the session is gone: so is the query
        return False
