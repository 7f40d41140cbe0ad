"""The handle of a started query: Spark's StreamingQuery, with a stateful task's failure
raised as the StatefulTaskError it is (`stage/failures.py`) rather than Spark's wrapping."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from pyspark_dstl.spark.stage.failures import StatefulTaskError, task_error_text


class StatefulQuery:
    """The started streaming query (Spark's StreamingQuery, every attribute passed through);
    `awaitTermination` and `processAllAvailable` raise a stateful task's failure as the
    StatefulTaskError, first line first, instead of Spark's StreamingQueryException."""

    def __init__(self, query: Any) -> None:
        self._query = query

    @property
    def query(self) -> Any:
        """Spark's StreamingQuery itself."""
        return self._query

    def __getattr__(self, name: str) -> Any:
        return getattr(self._query, name)

    def awaitTermination(self, timeout: int | None = None) -> bool | None:
        with _task_failures():
            return self._query.awaitTermination(timeout)

    def processAllAvailable(self) -> None:
        with _task_failures():
            self._query.processAllAvailable()


@contextlib.contextmanager
def _task_failures() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        text = task_error_text(str(exc))
        if text is None:
            raise
        error = StatefulTaskError(text)
        error.add_note(f"the streaming query stopped: {type(exc).__name__} "
                       f"(StatefulQuery.query.exception() has Spark's full report)")
        raise error from None
