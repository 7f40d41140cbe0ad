"""A started query: Spark's StreamingQuery, with a stateful task's failure
raised as the StatefulTaskError it is (`stage/failures.py`) rather than Spark's wrapping, and
the checkpoint location let go as soon as the query is seen to end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark_dstl.spark.stage.failures import stage_errors


class StatefulQuery:
    """The started streaming query (Spark's StreamingQuery, every attribute passed through);
    `awaitTermination` and `processAllAvailable` raise a stateful task's failure as the
    StatefulTaskError, first line first, instead of Spark's StreamingQueryException.
    `on_end` runs once `awaitTermination` or `stop` returns on a query that is no longer
    active (the driver lets go of its location there)."""

    def __init__(self, query: Any, on_end: Callable[[], None] | None = None) -> None:
        self._query = query
        self._on_end = on_end

    @property
    def query(self) -> Any:
        """Spark's StreamingQuery itself."""
        return self._query

    def __getattr__(self, name: str) -> Any:
        return getattr(self._query, name)

    def awaitTermination(self, timeout: int | None = None) -> bool | None:
        try:
            with stage_errors(query_stopped=True):
                return self._query.awaitTermination(timeout)
        finally:
            self._ended()

    def processAllAvailable(self) -> None:
        with stage_errors(query_stopped=True):
            self._query.processAllAvailable()

    def stop(self) -> None:
        try:
            self._query.stop()
        finally:
            self._ended()

    def _ended(self) -> None:
        if self._on_end is not None:
            self._on_end()
