"""Skip markers for tests of a feature the installed PySpark lacks, from the facts of
spark/pyspark_versions.py; each lacking version runs the test of the refusal instead
(tests/spark/test_pyspark_versions.py), in the version tier (scripts/run_version_tier.sh)."""

from __future__ import annotations

import pytest
from pyspark.sql.group import GroupedData

from pyspark_dstl.spark.pyspark_versions import (
    PYTHON_SOURCES_AVAILABLE_NOW,
    pyspark_version,
    version_of,
)

VERSION = pyspark_version()
ROW_API = hasattr(GroupedData, "transformWithState")
AVAILABLE_NOW_TIMERS = version_of(VERSION) >= PYTHON_SOURCES_AVAILABLE_NOW

needs_row_api = pytest.mark.skipif(
    not ROW_API, reason=f"PySpark {VERSION} has no Row-based transformWithState (4.1+)")
needs_available_now_timers = pytest.mark.skipif(
    not AVAILABLE_NOW_TIMERS,
    reason=f"PySpark {VERSION} runs no timer batch under availableNow (4.2+); refused by name")


def connect_has_transform_with_state() -> bool:
    """Whether the Spark Connect client's GroupedData has transformWithStateInPandas (4.1+)."""
    try:
        from pyspark.sql.connect.group import GroupedData as ConnectGroupedData
    except ImportError:
        return False
    return hasattr(ConnectGroupedData, "transformWithStateInPandas")
