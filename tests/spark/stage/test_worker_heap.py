"""A reused Python worker freezes the objects it holds before a task whenever it imported
modules since its last freeze, so the full collection PySpark's daemon runs after every task
visits only what later tasks made; a worker that is not reused is left alone."""

from __future__ import annotations

import gc
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from pyspark_dstl.spark.stage import worker_heap
from pyspark_dstl.spark.stage.worker_heap import freeze_imported_objects


@pytest.fixture
def unfrozen(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A reused worker's process that has not frozen yet, thawed again after the test."""
    monkeypatch.setenv(worker_heap.REUSE_VARIABLE, "1")
    monkeypatch.setattr(worker_heap, "_frozen_at", None)
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_the_first_task_freezes_every_object_the_process_holds(unfrozen: None) -> None:
    tracked = len(gc.get_objects())

    assert freeze_imported_objects()

    assert gc.get_freeze_count() >= tracked // 2
    assert len(gc.get_objects()) < tracked // 10


def test_a_worker_that_is_not_reused_does_not_freeze(
        unfrozen: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(worker_heap.REUSE_VARIABLE)

    assert not freeze_imported_objects()
    assert gc.get_freeze_count() == 0


def test_a_task_after_no_new_import_does_not_freeze_again(unfrozen: None) -> None:
    freeze_imported_objects()
    frozen = gc.get_freeze_count()
    garbage = [[] for _ in range(1000)]

    assert not freeze_imported_objects()
    assert gc.get_freeze_count() <= frozen  # frozen objects may be freed, none are added
    del garbage


def test_a_task_after_an_import_freezes_what_the_import_added(
        unfrozen: None, monkeypatch: pytest.MonkeyPatch) -> None:
    freeze_imported_objects()
    module = types.ModuleType("dstl_test_imported_later")
    module.table = {str(n): [n] for n in range(5000)}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    frozen = gc.get_freeze_count()

    assert freeze_imported_objects()
    assert gc.get_freeze_count() >= frozen + 4000  # other threads may free a few frozen ones


def test_a_forked_worker_freezes_on_its_own_first_task(unfrozen: None) -> None:
    freeze_imported_objects()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the forked worker: report whether its first task froze, then leave
        os.close(read)
        os.write(write, b"1" if freeze_imported_objects() else b"0")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(child, 0)

    assert answer == b"1"


def _planner_calls() -> list[tuple[str, Any]]:
    """What Spark's planner workers call on this library's data sources (creation asks for the
    schema, planning a read for the reader), with options that need no checkpoint."""
    from pyspark_dstl.spark.readers.progress_source import DstlProgressSource
    from pyspark_dstl.spark.readers.state_metadata import StateMetadataSource
    from pyspark_dstl.spark.readers.state_reader import DstlStateDataSource
    from pyspark_dstl.spark.time.ticks import DEMAND_OPTION, SCHEMA_OPTION, TickDataSource

    location = {"path": "file:///nowhere/checkpoint"}
    ticks = {SCHEMA_OPTION: '{"type": "struct", "fields": []}', DEMAND_OPTION: "/nowhere/demand"}
    return [
        ("dstl-progress schema", lambda: DstlProgressSource(location).schema()),
        ("dstl-progress reader", lambda: DstlProgressSource(location).reader(None)),
        ("state-metadata reader", lambda: StateMetadataSource(location).reader(None)),
        ("dstl-state reader", lambda: DstlStateDataSource(location).reader(None)),
        ("dstl-ticks schema", lambda: TickDataSource(ticks).schema()),
        ("dstl-ticks stream reader", lambda: TickDataSource(ticks).streamReader(None)),
    ]


@pytest.mark.parametrize("plan", [pytest.param(plan, id=name) for name, plan in _planner_calls()])
def test_a_data_source_planned_in_a_reused_worker_freezes_there(unfrozen: None,
                                                                plan: Any) -> None:
    plan()

    assert gc.get_freeze_count() > 0
