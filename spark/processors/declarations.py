"""Declarations checked on the driver when a stateful step is defined, so mistakes fail before
any task.

The processor's `init` runs once against a handle that records declarations but refuses state
access (as PySpark's driver-side pre-init does), on a copy of the processor: a bad state name
or TTL fails here, not inside the first batch's tasks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark_dstl.spark.processors.processor import AnyProcessor, StatefulProcessorHandle
from pyspark_dstl.spark.processors.state_variables import KeyContext
from pyspark_dstl.spark.spark_errors import StateVariableError


class _DriverStore:
    """State access is refused on the driver: init() may only declare."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise StateVariableError("state is not available in init(): declare state variables "
                                 "there and use them in the handle_* methods")

    def get(self, key: bytes, cf: str) -> bytes | None:
        return self._refuse()

    def put(self, key: bytes, value: bytes, cf: str) -> None:
        self._refuse()

    def remove(self, key: bytes, cf: str) -> None:
        self._refuse()

    def multi_get(self, keys: Sequence[bytes], cf: str) -> list[bytes | None]:
        return self._refuse()

    def put_many(self, items: Iterable[tuple[bytes, bytes]] = (), cf: str = "", *,
                 keys: Sequence[bytes] | None = None,
                 values: Sequence[bytes] | None = None) -> None:
        self._refuse()

    def remove_many(self, keys: Iterable[bytes], cf: str) -> None:
        self._refuse()

    def prefix_scan(self, prefix: bytes, cf: str) -> Iterator[tuple[bytes, bytes]]:
        return self._refuse()


def declaring_handle(time_mode: str = "none") -> StatefulProcessorHandle:
    """A handle that records declarations and refuses state access, as init() sees it on
    the driver."""
    return StatefulProcessorHandle(_DriverStore(), KeyContext(0, time_mode=time_mode),
                                   batch_id=-1, partition_id=-1, declaring_only=True)


def check_declarations(processor: AnyProcessor, time_mode: str = "none") -> None:
    """Run `init` (then `close`) on a copy of the processor with a declaring-only handle."""
    from pyspark import cloudpickle

    copy = cloudpickle.loads(cloudpickle.dumps(processor))
    copy.init(declaring_handle(time_mode))
    copy.close()
