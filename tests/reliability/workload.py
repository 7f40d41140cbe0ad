"""The crash tests' workload: commit seeded batches like a driver does, verify after restarts.

Run as a child process (``python -m tests.reliability.workload <url> --seed N ...``) so the
tests can SIGKILL it anywhere, or in-process through :class:`Workload`. On start it reads the
last committed batch id from the commit log, loads every partition's store at that commit
(by StoreCommit or, at random, by (version, unique id) alone), and compares the state with
the model recomputed from the seed. Then it commits further batches: every partition's store
commits, then one commit log entry names them all; snapshots run in the background, some
commits force one, and every few batches a cleanup deletes what retention no longer needs.

It writes as one run holding the root (lineage/fencing.py): the child takes it before its
recovery, and is refused (exit 5) while another live run holds it; a run that another one took
over stops at its next commit or cleanup (exit 6) without writing.

Events go to stdout as JSON lines. Exit status: 0 done, 3 a recovered state differed from the
model, 4 gave up after too many failed batches (a loud failure), 5 refused at start, 6 fenced;
anything else is a crash.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from pyspark_dstl.backend.backend_errors import BackendError, CheckpointHeldError, FencedError
from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.fencing.lease import CheckpointLease, acquire
from pyspark_dstl.backend.lineage.commit_log import CommitEntry, OperatorCommit
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.ops.cleanup import cleanup_checkpoint
from pyspark_dstl.backend.store.api import StateStore
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.changelog.changelog_errors import ChangelogError
from pyspark_dstl.materializer.materializer_errors import MaterializerError
from tests.reliability.model import (
    CFS,
    StateKey,
    WorkloadSpec,
    batch_changes,
    describe_difference,
    expected_state,
)

EXIT_MISMATCH = 3
EXIT_GAVE_UP = 4
EXIT_REFUSED = 5
EXIT_FENCED = 6
Emit = Callable[[dict[str, Any]], None]
LIBRARY_ERRORS = (BackendError, ChangelogError, MaterializerError)


class StateMismatchError(AssertionError):
    """A store loaded at a committed batch does not hold the model's state for it."""


class GaveUpError(RuntimeError):
    """More failed batches in a row than the workload tolerates."""


def read_state(store: StateStore) -> dict[StateKey, bytes]:
    return {(cf, key): value for cf in CFS for key, value in store.iterator(cf)}


class Workload:
    """A driver and its executors in one process: one provider per partition."""

    def __init__(self, spec: WorkloadSpec, url: str, options: BackendSettings, *,
                 emit: Emit | None = None, rng: random.Random | None = None,
                 cleanup_every: int = 0, retain: int = 2, force_snapshot_every: int = 0,
                 max_failures: int = 8) -> None:
        self.spec = spec
        self.url = url
        self.backend = StateBackend(options)
        self.emit: Emit = emit or (lambda event: None)
        self.rng = rng or random.Random()
        self.cleanup_every = cleanup_every
        self.retain = retain
        self.force_snapshot_every = force_snapshot_every
        self.max_failures = max_failures
        self.last_batch = -1
        self.failures = 0
        self._infos: dict[int, StoreCommit] = {}
        self._open: dict[int, StateStore] = {}
        self._lease: CheckpointLease | None = None

    # --- the root ------------------------------------------------------------------------------

    def take(self) -> CheckpointLease:
        """Hold the root as this run (refused while another run holds it)."""
        if self._lease is None:
            storage = self.backend.context(self.url).storage
            self._lease = acquire(storage, self.backend.settings.fencing)
            self.emit({"event": "holding", "run_id": self._lease.run_id,
                       "epoch": self._lease.epoch})
        return self._lease

    # --- recovery ------------------------------------------------------------------------------

    def recover(self, *, check: bool = True) -> int:
        """Load every store at the last committed batch and check it against the model."""
        started = time.monotonic()
        self.emit({"event": "recovering"})
        latest = self.backend.commit_log(self.url).latest()
        batch_id, infos = -1, {}
        if latest is not None:
            batch_id, entry = latest
            infos = dict(entry.operators[self.spec.operator].stores)
        loaded_by = []
        for partition in range(self.spec.partitions):
            provider = self.backend.provider(self.url, self.spec.operator, partition)
            info = infos.get(partition)
            by_id = info is not None and self.rng.random() < 0.5
            if info is None:
                store = provider.get_store(0)
            else:
                store = provider.get_store(info.version, info.unique_id if by_id else info)
            loaded_by.append("id" if by_id else "info")
            expected = expected_state(self.spec, batch_id, partition)
            actual = read_state(store)
            if check and actual != expected:
                difference = describe_difference(actual, expected)
                self.emit({"event": "mismatch", "batch": batch_id, "partition": partition,
                           "loaded_by": loaded_by[-1], **difference})
                raise StateMismatchError(f"partition {partition} at batch {batch_id}: "
                                         f"{difference}")
            self._open[partition] = store
        self.last_batch, self._infos = batch_id, infos
        self.emit({"event": "recovered", "batch": batch_id, "loaded_by": loaded_by,
                   "seconds": round(time.monotonic() - started, 4)})
        return batch_id

    def open_store(self, partition: int) -> StateStore:
        """The store recover() left open for `partition` (the next batch writes into it)."""
        return self._open[partition]

    # --- batches -------------------------------------------------------------------------------

    def run_batch(self, batch_id: int) -> None:
        """Commit every partition's store, then the commit log entry naming them."""
        force = bool(self.force_snapshot_every) and batch_id % self.force_snapshot_every == 0
        infos: dict[int, StoreCommit] = {}
        for partition in range(self.spec.partitions):
            store = self._open.pop(partition, None) or self._load(partition)
            for (cf, key), value in batch_changes(self.spec, batch_id, partition).items():
                if value is None:
                    store.remove(key, cf)
                else:
                    store.put(key, value, cf)
            infos[partition] = store.commit(materialize=force)
        entry = CommitEntry(batch_id, {self.spec.operator: OperatorCommit(
            self.spec.partitions, infos)})
        self.backend.commit_log(self.url).write(batch_id, entry, lease=self.take())
        self.last_batch, self._infos = batch_id, infos
        self.emit({"event": "committed", "batch": batch_id, "forced_snapshot": force})

    def cleanup(self) -> None:
        storage = self.backend.context(self.url).storage
        report = cleanup_checkpoint(storage, self.retain, dry_run=False, lease=self.take())
        self.emit({"event": "cleanup", "batch": self.last_batch, "deleted": len(report.files),
                   "problems": report.problems})

    def run(self, last_batch: int) -> None:
        """Commit batches until `last_batch`; a failed batch is retried after a recovery."""
        while self.last_batch < last_batch:
            try:
                self.run_batch(self.last_batch + 1)
                if self.cleanup_every and (self.last_batch + 1) % self.cleanup_every == 0:
                    self.cleanup()
                self.failures = 0
            except FencedError:
                raise  # another run holds the root now: stop, write nothing more
            except LIBRARY_ERRORS as exc:
                self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        self.failures += 1
        self.emit({"event": "batch_failed", "batch": self.last_batch + 1,
                   "error": f"{type(exc).__name__}: {exc}"[:500]})
        if self.failures > self.max_failures:
            raise GaveUpError(f"{self.failures} failures in a row, the last: {exc}") from exc
        for store in self._open.values():
            store.abort()
        self._open.clear()
        while True:  # the commit may have landed although it reported an error: read back
            try:
                self.recover()
                return
            except LIBRARY_ERRORS as again:
                self.failures += 1
                self.emit({"event": "recover_failed", "error": f"{again}"[:500]})
                if self.failures > self.max_failures:
                    raise GaveUpError(f"cannot recover: {again}") from again

    def _load(self, partition: int) -> StateStore:
        provider = self.backend.provider(self.url, self.spec.operator, partition)
        info = self._infos.get(partition)
        return provider.get_store(0) if info is None else provider.get_store(info.version, info)

    def close(self) -> None:
        for store in self._open.values():
            store.abort()
        self._open.clear()
        if self._lease is not None:
            self._lease.release("the workload ended")
        self.backend.close()


# --- the child process -------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.workload")
    parser.add_argument("url", help="checkpoint root (file:// or s3://)")
    parser.add_argument("--seed", type=int, required=True, help="the model's seed")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--last-batch", type=int, default=10**9,
                        help="stop after committing this batch id")
    parser.add_argument("--cleanup-every", type=int, default=3)
    parser.add_argument("--retain", type=int, default=2)
    parser.add_argument("--force-snapshot-every", type=int, default=7)
    parser.add_argument("--run-seed", type=int, default=None,
                        help="seed of this run's random choices (how to load a store)")
    parser.add_argument("--verify-only", action="store_true",
                        help="recover, compare with the model and stop")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="spark.dstl.* setting (repeatable)")
    return parser


def parse_conf(items: Sequence[str]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--conf {item!r}: expected KEY=VALUE")
        conf[key.strip()] = value
    return conf


def print_event(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    spec = WorkloadSpec(seed=args.seed, partitions=args.partitions)
    options = BackendSettings.from_mapping(parse_conf(args.conf))
    workload = Workload(spec, args.url, options, emit=print_event,
                        rng=random.Random(args.run_seed), cleanup_every=args.cleanup_every,
                        retain=args.retain, force_snapshot_every=args.force_snapshot_every)
    try:
        if not args.verify_only:
            workload.take()
        workload.recover()
        if not args.verify_only:
            workload.run(args.last_batch)
    except CheckpointHeldError as exc:
        print_event({"event": "refused", "error": str(exc)[:500]})
        return EXIT_REFUSED
    except FencedError as exc:
        print_event({"event": "fenced", "batch": workload.last_batch + 1,
                     "error": str(exc)[:500]})
        return EXIT_FENCED
    except StateMismatchError:
        return EXIT_MISMATCH
    except GaveUpError as exc:
        print_event({"event": "gave_up", "error": str(exc)[:500]})
        return EXIT_GAVE_UP
    finally:
        workload.close()
    print_event({"event": "done", "batch": workload.last_batch})
    return 0


if __name__ == "__main__":
    sys.exit(main())
