"""What the library reads from a Spark session: Spark's Arrow row limit, read the same way
by the Python data sources' check, the frame builder and the PySpark processor path."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from pyspark_dstl.spark.session import (
    ARROW_RECORDS,
    arrow_record_limit,
    python_sources_allowed,
    session_settings,
)

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(("value", "limit"), [("500", 500), ("0", 0), ("-1", 0)])
def test_sparks_arrow_row_limit_reads_as_rows_and_no_limit_as_zero(
        spark: Any, value: str, limit: int) -> None:
    with session_settings(spark, {ARROW_RECORDS: value}):
        assert arrow_record_limit(spark) == limit


def test_python_sources_are_off_with_a_warning_naming_the_setting_when_there_is_no_limit(
        spark: Any, caplog: pytest.LogCaptureFixture) -> None:
    with session_settings(spark, {ARROW_RECORDS: "-1"}), caplog.at_level(logging.WARNING):
        assert not python_sources_allowed(spark, "timers")
    assert f"{ARROW_RECORDS}=-1: timers are off" in caplog.text
    assert python_sources_allowed(spark, "timers")
