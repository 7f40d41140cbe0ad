"""One writer per checkpoint location: a run holds the location through an epoch and a lease.

A run takes the location by creating `epochs/<e>` (create-only: of two runs racing for epoch e,
one wins) and holds it while that is the newest epoch. It renews its lease by creating
`epochs/<e>.<k>` every third of the lease duration (never overwriting anything) and lets go by
creating `epochs/<e>.end`. Before every commit log entry and every cleanup deletion it checks
that its epoch is still the newest (FencedError otherwise), and the commit log only accepts
the one name that follows what it has seen (commit_log.py).

A run starting on a location another run holds:
- the holder let go (`.end`): the location is free;
- the holder ran on this host and its process is gone (lineage/process.py), or it belongs to
  this process and is idle: it is known dead, or let go at once;
- otherwise the starter watches the holder's renewals for one lease duration by its own
  clock: a renewal means the holder lives and the start is refused (CheckpointHeldError
  naming the location and the holder); silence means it is presumed dead.
Taking over from a holder that did not let go writes fences into the commit log at the names
the old run would use next, so whatever the old run still does (a paused process resuming, a
partition healing), no entry of it can join the committed lineage after the takeover. No
clock is compared across hosts: a holder paused for longer than the lease is fenced when it
resumes, which costs it its run, never the checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from pyspark_dstl.backend.backend_errors import (
    BackendError,
    CheckpointHeldError,
    CorruptCheckpointError,
    FencedError,
)
from pyspark_dstl.backend.backend_settings import FencingSettings
from pyspark_dstl.backend.fencing.epochs import (
    END_MAGIC,
    EPOCH_MAGIC,
    EPOCHS_PREFIX,
    RENEWAL_MAGIC,
    EpochFiles,
    EpochRecord,
    EpochTable,
    decode_epoch,
    encode,
    end_path,
    epoch_path,
    renewal_path,
)
from pyspark_dstl.backend.fencing.process import ProcessIdentity, is_this_process, known_dead
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.changelog.changelog_errors import (
    ChangelogError,
    ObjectExistsError,
    UploadFailedError,
)
from pyspark_dstl.core.errors import LoopClosedError
from pyspark_dstl.materializer.remote import RemoteFiles

log = logging.getLogger(__name__)
HELD, RELEASED, FENCED = "held", "released", "fenced"
KEEP_EPOCHS = 4
"""Older epochs' files are deleted when a run takes the location, except the newest few (for
`inspect`); the newest epoch's own files are never deleted by anyone else."""
_MAX_ACQUIRE_ROUNDS = 8


class LeaseStorage(RemoteFiles, Protocol):
    """What the lease needs of ChangelogService: RemoteFiles plus the location's URL."""

    @property
    def url(self) -> str: ...


@dataclass(frozen=True)
class Holder:
    """The run that holds a location, as the epoch files tell."""

    record: EpochRecord
    renewals: int
    ended: bool


class CheckpointLease:
    """This run's hold on a location. `check` before writing or deleting anything."""

    def __init__(self, storage: LeaseStorage, record: EpochRecord,
                 commit_log: CommitLog) -> None:
        self.storage = storage
        self.record = record
        self.commit_log = commit_log
        self._state = HELD
        self._lock = threading.Lock()
        self._in_use = 0
        self._busy: Callable[[], bool] | None = None
        self._release_when: Callable[[], bool] | None = None
        self._renewals = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.newer: EpochRecord | None = None  # who fenced this run, once known

    @property
    def epoch(self) -> int:
        return self.record.epoch

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def state(self) -> str:
        return self._state

    @property
    def url(self) -> str:
        return self.storage.url

    def describe(self) -> str:
        return self.record.describe()

    # --- the fencing check --------------------------------------------------------------------

    def check(self, action: str) -> None:
        """FencedError unless this run's epoch is still the newest one and not ended."""
        if self._state == RELEASED:
            raise self._fenced_error(action)
        table = _read_table(self.storage)
        newest = table.newest
        if self._state == HELD and newest is not None and newest.epoch == self.epoch \
                and not newest.ended:
            return
        if newest is not None and newest.epoch > self.epoch:
            with contextlib.suppress(BackendError, ChangelogError):
                self.newer = _read_record(self.storage, newest.epoch)
        self._set_state(FENCED)
        raise self._fenced_error(action)

    def _fenced_error(self, action: str) -> FencedError:
        if self._state == RELEASED:
            return FencedError(f"checkpoint {self.url}: {self.describe()} let go of it; a "
                               f"released run cannot {action}")
        newer = self.newer.describe() if self.newer is not None else "a newer run"
        return FencedError(f"checkpoint {self.url}: {self.describe()} no longer holds it, "
                           f"{newer} took it over; this run must stop and did not {action}")

    @contextlib.contextmanager
    def use(self) -> Iterator[CheckpointLease]:
        """Marks the run busy (a batch, a commit, a cleanup): this process does not take
        the location from it meanwhile."""
        with self._lock:
            self._in_use += 1
        try:
            yield self
        finally:
            with self._lock:
                self._in_use -= 1

    def busy(self) -> bool:
        if self._in_use:
            return True
        predicate = self._busy
        return predicate is not None and predicate()

    def busy_while(self, active: Callable[[], bool]) -> None:
        """Busy while `active()` (e.g. its streaming query runs); let go once it is not."""
        self._busy = active
        self._release_when = lambda: not active()

    # --- lease --------------------------------------------------------------------------------

    def start_renewing(self, release_when: Callable[[], bool] | None = None) -> None:
        """Renew every third of the lease on a daemon thread; let go once `release_when()`."""
        interval = self.record.lease_seconds / 3
        self._release_when = self._release_when or release_when

        def run() -> None:
            while not self._stop.wait(interval):
                if self._state != HELD:
                    return
                try:
                    done = self._release_when
                    if done is not None and done():
                        self.release("its query ended")
                        return
                    self.renew()
                except FencedError as exc:
                    log.warning("%s", exc)
                    return
                except (LoopClosedError, RuntimeError):
                    return  # its storage closed, or the interpreter is shutting down
                except (BackendError, ChangelogError) as exc:
                    if _refused_at_exit(exc):
                        return
                    log.warning("checkpoint %s: lease renewal of %s failed, trying again: %s",
                                self.url, self.describe(), exc)

        self._thread = threading.Thread(target=run, name=f"dstl-lease-{self.run_id}",
                                        daemon=True)
        self._thread.start()

    def renew(self) -> None:
        """Create the next renewal file, then check the epoch (FencedError if taken over)."""
        if self._state != HELD:
            raise self._fenced_error("renew its lease")
        self._renewals += 1
        body = {"epoch": self.epoch, "run_id": self.run_id, "renewal": self._renewals,
                "created_ms": int(time.time() * 1000)}
        with contextlib.suppress(ObjectExistsError):  # an earlier request of ours landed
            _put(self.storage, renewal_path(self.epoch, self._renewals),
                 encode(RENEWAL_MAGIC, body))
        self.check("renew its lease")
        if self._renewals > 2:  # watchers compare the newest; older ones only take space
            self.storage.loop.run(self.storage.adelete_many(
                [renewal_path(self.epoch, self._renewals - 2)]))

    def release(self, reason: str = "released") -> None:
        """Let go: no more writes; the next run takes the location without waiting or fencing."""
        with self._lock:
            if self._state != HELD or self._in_use:
                if self._state == HELD:
                    raise BackendError(f"checkpoint {self.url}: {self.describe()} is busy and "
                                       f"cannot let go now")
                return
            self._state = RELEASED
        self._stop.set()
        _forget(self)
        body = {"epoch": self.epoch, "run_id": self.run_id, "reason": reason,
                "created_ms": int(time.time() * 1000)}
        try:
            _put(self.storage, end_path(self.epoch), encode(END_MAGIC, body))
        except (BackendError, ChangelogError, LoopClosedError) as exc:
            log.warning("checkpoint %s: %s could not record that it let go (the next run "
                        "waits for its lease instead): %s", self.url, self.describe(), exc)

    def _set_state(self, state: str) -> None:
        with self._lock:
            if self._state == HELD:
                self._state = state
        if state != HELD:
            self._stop.set()
            _forget(self)


def _refused_at_exit(exc: BaseException) -> bool:
    """Whether a renewal failed because the process is exiting: its main thread has ended, or
    the storage's thread pool refused the work (a RuntimeError beneath the storage error, as
    Python's thread pools raise once the interpreter's shutdown has begun)."""
    if not threading.main_thread().is_alive():
        return True
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, RuntimeError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


# --- taking a location ---------------------------------------------------------------------------


def acquire(storage: LeaseStorage, settings: FencingSettings, *, purpose: str = "run",
            take_over: str | None = None, run_id: str | None = None,
            release_when: Callable[[], bool] | None = None) -> CheckpointLease:
    """Take the location for a new run (see the module docstring) and renew its lease until it
    lets go (`release()`, or once `release_when()` holds); CheckpointHeldError while a live
    run holds it. `take_over`: the run id of a holder known to be dead, taken over at once
    (refused if another run holds the location)."""
    key = _root_key(storage)
    with _lock_of(key):
        _let_go_in_process(key, storage, take_over)
        run = run_id or uuid.uuid4().hex[:16]
        for _ in range(_MAX_ACQUIRE_ROUNDS):
            table = _read_table(storage)
            newest = table.newest
            fenced: EpochRecord | None = None
            if newest is not None and not newest.ended:
                fenced = _presumed_dead(storage, newest, take_over)
                if fenced is None:
                    continue  # it moved on while watched: look again
            epoch = max(table.epochs, default=0) + 1
            record = EpochRecord(epoch, run, ProcessIdentity.current(),
                                 settings.lease_duration, purpose,
                                 (fenced.epoch, fenced.run_id) if fenced else None)
            try:
                _put(storage, epoch_path(epoch), encode(EPOCH_MAGIC, record.to_body()))
            except ObjectExistsError:
                continue  # another run took this epoch first: look at it
            lease = CheckpointLease(storage, record, CommitLog(storage))
            if fenced is not None:
                lease.commit_log.fence(epoch, run, (fenced.epoch, fenced.run_id))
            try:
                lease.check("take the checkpoint")
            except FencedError as exc:
                raise CheckpointHeldError(f"checkpoint {storage.url}: taken by another run "
                                          f"while this one took it: {exc}") from exc
            _prune(storage, table, epoch)
            _remember(key, lease)
            lease.start_renewing(release_when)
            log.info("checkpoint %s: taken by %s%s", storage.url, record.describe(),
                     f", fencing {fenced.describe()}" if fenced else "")
            return lease
        raise CheckpointHeldError(f"checkpoint {storage.url}: other runs kept taking it while "
                                  f"this one tried {_MAX_ACQUIRE_ROUNDS} times")


def _presumed_dead(storage: LeaseStorage, newest: EpochFiles,
                   take_over: str | None) -> EpochRecord | None:
    """The holder's record once it is known or presumed dead; None when its epoch ended or a
    newer one appeared meanwhile; CheckpointHeldError while it lives."""
    record = _read_record(storage, newest.epoch)
    if take_over is not None:
        if take_over != record.run_id:
            raise CheckpointHeldError(f"checkpoint {storage.url} is held by "
                                      f"{record.describe()}, not by run {take_over} named to "
                                      f"be taken over")
        return record
    if is_this_process(record.process) or known_dead(record.process):
        return record  # this process's run is not in the registry: it is gone
    verdict = _watch(storage, newest, record.lease_seconds)
    if verdict == "renewed":
        raise CheckpointHeldError(
            f"checkpoint {storage.url} is held by {record.describe()}, which renewed its "
            f"lease while this run waited; stop that run first, or if it is dead, wait "
            f"{record.lease_seconds:g} s after its last renewal or take over with "
            f"`python -m pyspark_dstl takeover {storage.url} --run {record.run_id}`")
    return record if verdict == "silent" else None


def _watch(storage: LeaseStorage, newest: EpochFiles, lease_seconds: float) -> str:
    """"renewed", "moved" (ended or a newer epoch) or "silent" for a whole lease duration,
    measured by this process's monotonic clock only."""
    poll = min(1.0, lease_seconds / 10)
    deadline = time.monotonic() + lease_seconds + poll
    while time.monotonic() < deadline:
        time.sleep(poll)
        now = _read_table(storage)
        current = now.epochs.get(newest.epoch)
        if now.newest is None or now.newest.epoch != newest.epoch or current is None \
                or current.ended:
            return "moved"
        if current.progress != newest.progress:
            return "renewed"
    return "silent"


def holder_of(storage: RemoteFiles) -> Holder | None:
    """Who holds (or last held) the location; None when no run ever took it."""
    newest = _read_table(storage).newest
    if newest is None:
        return None
    return Holder(_read_record(storage, newest.epoch), newest.renewals, newest.ended)


def take_over(storage: LeaseStorage, settings: FencingSettings, run_id: str) -> EpochRecord:
    """Fence run `run_id`, known to be dead, and leave the location free; the takeover's own
    epoch record. CheckpointHeldError if another run holds the location."""
    lease = acquire(storage, settings, purpose="takeover", take_over=run_id)
    lease.release("takeover done")
    return lease.record


# --- this process's runs ---------------------------------------------------------------------

_registry: dict[str, CheckpointLease] = {}
_locks: dict[str, threading.Lock] = {}
_registry_lock = threading.Lock()


def held_lease(storage: RemoteFiles) -> CheckpointLease | None:
    """The lease a run of this process holds on the location, if any."""
    with _registry_lock:
        return _registry.get(_root_key(storage))


def _let_go_in_process(key: str, storage: LeaseStorage, take_over: str | None) -> None:
    held = _registry.get(key)
    if held is None or held.state != HELD:
        return
    if take_over == held.run_id:
        held._set_state(FENCED)  # named as dead: fenced like a run of another process
    elif take_over is not None:
        raise CheckpointHeldError(f"checkpoint {storage.url} is held by {held.describe()} "
                                  f"of this process, not by run {take_over} named to be "
                                  f"taken over")
    elif held.busy():
        raise CheckpointHeldError(f"checkpoint {storage.url} is held by {held.describe()} "
                                  f"of this process, which is running")
    else:
        held.release("taken over by a newer run of its process")


def _remember(key: str, lease: CheckpointLease) -> None:
    with _registry_lock:
        _registry[key] = lease


def _forget(lease: CheckpointLease) -> None:
    with _registry_lock:
        key = _root_key(lease.storage)
        if _registry.get(key) is lease:
            del _registry[key]


def _lock_of(key: str) -> threading.Lock:
    with _registry_lock:
        return _locks.setdefault(key, threading.Lock())


def _root_key(storage: RemoteFiles) -> str:
    store = getattr(storage, "store", None)
    return str(getattr(store, "root_url", None) or getattr(storage, "url", id(storage)))


# --- files -----------------------------------------------------------------------------------


def _read_table(storage: RemoteFiles) -> EpochTable:
    try:
        return EpochTable.from_listing(storage.loop.run(storage.alist(EPOCHS_PREFIX + "/")))
    except ChangelogError as exc:
        raise BackendError(f"cannot list the epochs of the checkpoint: {exc}") from exc


def _read_record(storage: RemoteFiles, epoch: int) -> EpochRecord:
    path = epoch_path(epoch)
    try:
        data = storage.loop.run(storage.aget(path))
    except ChangelogError as exc:
        raise CorruptCheckpointError(f"cannot read epoch file {path!r}: {exc}") from exc
    return decode_epoch(data, path)


def _put(storage: RemoteFiles, path: str, data: bytes) -> None:
    """Create-only; ObjectExistsError when the name is taken."""
    try:
        storage.loop.run(storage.aput(path, data))
    except UploadFailedError as exc:
        if isinstance(exc.__cause__, ObjectExistsError):
            raise exc.__cause__ from exc
        raise BackendError(f"cannot create {path!r}: {exc}") from exc


def _prune(storage: RemoteFiles, table: EpochTable, epoch: int) -> None:
    """Files of epochs older than the newest KEEP_EPOCHS, and old epochs' renewals."""
    stale = [path for files in table.epochs.values() if files.epoch < epoch
             for path in files.paths
             if files.epoch <= epoch - KEEP_EPOCHS or path not in (
                 epoch_path(files.epoch), end_path(files.epoch))]
    if stale:
        try:
            storage.loop.run(storage.adelete_many(stale))
        except ChangelogError as exc:
            log.warning("checkpoint: could not delete %d old epoch file(s): %s", len(stale), exc)
