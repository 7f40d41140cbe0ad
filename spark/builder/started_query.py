"""A started query: Spark's StreamingQuery, with a stateful task's failure
raised as the StatefulTaskError it is (`stage/failures.py`) rather than Spark's wrapping."""

from __future__ import annotations

from typing import Any

from pyspark_dstl.spark.stage.failures import stage_errors


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
        with stage_errors(query_stopped=True):
            return self._query.awaitTermination(timeout)

    def processAllAvailable(self) -> None:
        with stage_errors(query_stopped=True):
            self._query.processAllAvailable()

