"""The workload's deterministic history: what every batch writes, and the state after it.

Nothing here remembers anything: the changes of (batch, partition) come from a generator seeded
with exactly those numbers, so the state after batch b is recomputed from the seed alone. The
crash tests therefore need to know only "the last committed batch id", which they read back from
the commit log after a restart, never from the process that died.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

CFS = ("default", "aux")
StateKey = tuple[str, bytes]
Changes = dict[StateKey, bytes | None]  # None deletes


@dataclass(frozen=True)
class WorkloadSpec:
    seed: int
    partitions: int = 2
    keys: int = 48
    changes_per_batch: int = 10
    big_value_every: int = 5  # every n-th batch of a partition writes one ~40 KB value
    big_value_bytes: int = 40_000
    operator: str = "rel"


def batch_changes(spec: WorkloadSpec, batch_id: int, partition: int) -> Changes:
    """Puts and deletes of one batch in one partition; the same for every process."""
    rng = random.Random(f"dstl-reliability:{spec.seed}:{batch_id}:{partition}")
    changes: Changes = {}
    for _ in range(spec.changes_per_batch):
        cf = CFS[0] if rng.random() < 0.7 else CFS[1]
        key = b"k%03d" % rng.randrange(spec.keys)
        if rng.random() < 0.25:
            changes[(cf, key)] = None
        else:
            changes[(cf, key)] = b"%d:%d:%08x" % (batch_id, partition, rng.getrandbits(32))
    if spec.big_value_every and (batch_id + partition) % spec.big_value_every == 0:
        changes[(CFS[1], b"big%d" % rng.randrange(4))] = rng.randbytes(spec.big_value_bytes)
    return changes


def apply_changes(state: dict[StateKey, bytes], changes: Changes) -> None:
    for key, value in changes.items():
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value


def expected_state(spec: WorkloadSpec, last_batch: int, partition: int) -> dict[StateKey, bytes]:
    """The state of `partition` once batches 0..last_batch are committed (-1: none)."""
    state: dict[StateKey, bytes] = {}
    for batch_id in range(last_batch + 1):
        apply_changes(state, batch_changes(spec, batch_id, partition))
    return state


def describe_difference(actual: dict[StateKey, bytes],
                        expected: dict[StateKey, bytes]) -> dict[str, list[str]]:
    """A short, printable account of how two states differ (empty lists when equal)."""
    def show(keys: set[StateKey]) -> list[str]:
        return [f"{cf}/{key.decode(errors='replace')}" for cf, key in sorted(keys)][:10]

    return {
        "missing": show(expected.keys() - actual.keys()),
        "unexpected": show(actual.keys() - expected.keys()),
        "different": show({k for k in actual.keys() & expected.keys()
                           if actual[k] != expected[k]}),
    }
