"""The FLIP-158 example, step by step, against the S3 API behind the fault proxy.

    a; CP1 = persist(0); b; materialization starts (upTo = next_sqn()); c; CP2 = persist(0);
    CP1 and CP2 complete; materialization completes; truncate(upTo); d; CP3 = persist(upTo)
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pyspark_dstl.changelog import ChangelogHandle, ChangelogService
from tests.support import FaultRule, S3Env

A, B, C, D = (1, b"a"), (2, b"b"), (3, b"c"), (4, b"d")


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.005)


def test_flip158_lifecycle(s3: S3Env) -> None:
    # CP1's upload is held at the proxy, so CP2 is planned while `a` is still in flight.
    s3.proxy.add_rule(FaultRule("delay", method="PUT", delay=0.5, times=1))
    # Without hedges, the request count at the proxy is exact.
    options = s3.options.with_changes(persist_delay=0.001, hedging_enabled=False)
    with ChangelogService(s3.url, options) as storage:
        writer = storage.create_writer("op-0/part-3", directory="state/0/3")
        writer.append(*A)
        cp1 = writer.persist(0)
        wait_until(lambda: s3.proxy.count("PUT") == 1)
        writer.append(*B)
        up_to = writer.next_sqn()
        writer.append(*C)
        cp2 = writer.persist(0)
        h1, h2 = cp1.result(10), cp2.result(10)
        released = writer.truncate(up_to)
        writer.append(*D)
        h3 = writer.persist(up_to).result(10)

        def read(handle: ChangelogHandle) -> list[tuple[int, tuple[tuple[int, bytes], ...]]]:
            return [(cs.sqn, cs.entries) for cs in storage.reader().read(handle)]

        assert read(h1) == [(0, (A,))]
        assert read(h2) == [(0, (A,)), (1, (B,)), (2, (C,))]
        assert read(h3) == [(2, (C,)), (3, (D,))]

    assert up_to == 2
    assert [(h.from_sqn, h.to_sqn) for h in (h1, h2, h3)] == [(0, 1), (0, 3), (2, 4)]
    (a_file,) = h1.paths
    a_file_again, bc_file = h2.paths
    bc_file_again, d_file = h3.paths
    assert (a_file_again, bc_file_again) == (a_file, bc_file)
    # `a` went up once, in its own file; CP2 reused that upload instead of sending it again.
    assert s3.proxy.count("PUT") == 3
    assert s3.proxy.count("PUT", a_file) == 1
    assert s3.direct_keys() == sorted([a_file, bc_file, d_file])
    # Truncating below upTo frees a's file; b's file still holds c, which CP3 needs.
    assert released == [a_file]
