"""Which state reads the switch sends to this backend: a move reads the Spark checkpoint it
moves through Spark's own sources, whatever that location already holds."""

from __future__ import annotations

import threading

from pyspark_dstl.spark.readers.routing import routed_read, sparks_own_state_reads


def test_inside_sparks_own_state_reads_no_read_is_routed_here() -> None:
    with sparks_own_state_reads():
        # no session is needed: the read goes to Spark before anything is looked at
        assert routed_read(None, "statestore", "/any/location", {}) is None
        assert routed_read(None, "State-Metadata", "/any/location", {}) is None


def test_sparks_own_state_reads_ends_with_its_block_and_nests() -> None:
    with sparks_own_state_reads():
        with sparks_own_state_reads():
            pass
        assert routed_read(None, "statestore", "/any/location", {}) is None
    seen: list[object] = []

    def read_elsewhere() -> None:
        try:
            routed_read(None, "statestore", "/any/location", {})
        except AttributeError as exc:  # outside the block the session's settings are read
            seen.append(exc)

    read_elsewhere()
    assert seen, "outside the block the read went on to look at the location"


def test_sparks_own_state_reads_holds_for_its_thread_only() -> None:
    seen: list[object] = []

    def other_thread() -> None:
        try:
            routed_read(None, "statestore", "/any/location", {})
        except AttributeError as exc:
            seen.append(exc)

    with sparks_own_state_reads():
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    assert seen, "another thread's read was not routed as usual"
