"""Property: whatever appends, rollovers, persists and truncates three writers go through, every
handle a persist returns reads back exactly the change sets appended in its range.

Small in-flight and pre-emptive limits make backpressure and pre-emptive uploads part of the
random schedules. The expected contents are recorded from the SQN each append landed in, so the
test does not re-implement the writer's rollover rules; it checks them instead (SQNs dense and
never decreasing, next_sqn naming the next append's SQN).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pyspark_dstl.changelog import ChangelogHandle, ChangelogService, ChangelogSettings
from pyspark_dstl.changelog.storage.memory import MemoryStorage

WRITERS = 3
OPTIONS = ChangelogSettings(persist_delay=0.001, preemptive_persist_threshold=24,
                           max_in_flight_bytes=40, persist_size_threshold=64)

writer_index = st.integers(0, WRITERS - 1)
fraction = st.floats(0.0, 1.0)
operations = st.lists(st.one_of(
    st.tuples(st.just("append"), writer_index, st.integers(0, 7),
              st.binary(min_size=4, max_size=40)),
    st.tuples(st.just("next_sqn"), writer_index),
    st.tuples(st.just("persist"), writer_index, fraction),
    st.tuples(st.just("truncate"), writer_index, fraction),
), min_size=10, max_size=60)


@dataclass
class Expected:
    """What one writer was given, by the SQN each append reported landing in."""

    entries: dict[int, list[tuple[int, bytes]]] = field(
        default_factory=lambda: defaultdict(list))
    next_append_sqn: int | None = None


def pick(low: int, high: int, where: float) -> int:
    return low + round(where * (high - low))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_every_handle_reads_back_exactly_its_range(ops: list[tuple[Any, ...]]) -> None:
    name = f"prop-{uuid.uuid4().hex}"
    try:
        with ChangelogService(f"memory://{name}", OPTIONS) as storage:
            writers = [storage.create_writer(f"log-{n}") for n in range(WRITERS)]
            expected = [Expected() for _ in range(WRITERS)]
            persisted: list[tuple[int, int, Future[ChangelogHandle]]] = []
            released: set[str] = set()
            for op in ops:
                writer, model = writers[op[1]], expected[op[1]]
                if op[0] == "append":
                    writer.append(op[2], op[3])
                    sqn = writer.last_appended_sqn
                    assert sqn is not None
                    assert model.next_append_sqn in (None, sqn)
                    model.next_append_sqn = None
                    model.entries[sqn].append((op[2], op[3]))
                elif op[0] == "next_sqn":
                    model.next_append_sqn = writer.next_sqn()
                elif op[0] == "persist":
                    start = pick(writer.lowest_sqn, writer.next_sqn(), op[2])
                    persisted.append((op[1], start, writer.persist(start)))
                else:
                    released.update(writer.truncate(pick(writer.lowest_sqn, writer.next_sqn(),
                                                         op[2])))
            reader = storage.reader()
            for index, start, future in persisted:
                handle = future.result(10)
                assert handle.from_sqn == start
                got = {cs.sqn: list(cs.entries) for cs in reader.read(handle)}
                want = {sqn: entries for sqn, entries in expected[index].entries.items()
                        if handle.from_sqn <= sqn < handle.to_sqn}
                assert got == want
            for writer, model in zip(writers, expected, strict=True):
                assert sorted(model.entries) == list(range(writer.next_sqn()))  # dense SQNs
                retained = writer.persist(writer.lowest_sqn).result(10)
                assert not released & set(retained.paths)
            metrics = storage.metrics_snapshot()
            event(f"pre-emptive persists: {metrics['preemptive_persists'] > 0}")
            event(f"blocked by the in-flight limit: {metrics['blocked_seconds'] > 0}")
    finally:
        MemoryStorage.drop(name)
