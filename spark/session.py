"""What a Spark session says about how a query may run: Python data sources allowed,
batches without data, classic or Connect. Read on the driver when a query starts; and
session settings changed for one call and put back."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

ARROW_RECORDS = "spark.sql.execution.arrow.maxRecordsPerBatch"


def python_sources_allowed(spark: Any, what: str) -> bool:
    """PySpark's Python data sources refuse a maxRecordsPerBatch of 0 or less (no limit);
    without them, `what` is not available (a warning says so)."""
    try:
        value = int(str(spark.conf.get(ARROW_RECORDS)))
    except (ValueError, Exception):  # an older Spark without the key: sources work
        return True
    if value > 0:
        return True
    logging.getLogger(__name__).warning(
        "%s=%s: %s are off for this query (PySpark's Python data sources need a positive "
        "value)", ARROW_RECORDS, value, what)
    return False


def no_data_batches(spark: Any) -> bool:
    """Whether Spark runs batches without new data (spark.sql.streaming.noDataMicroBatches
    .enabled): only then do timers that fall due start a batch; otherwise they fire with the
    next batch that has data, as in Spark."""
    value = spark.conf.get("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    return str(value).strip().lower() != "false"


def is_connect(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect client session."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


@contextlib.contextmanager
def session_settings(spark: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """`settings` in force on `spark` for the block, then each put back as it was (unset
    again when it was unset). Inside foreachBatch the session is the query's own copy, so
    only this query's batch sees them."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
