"""What a Spark session says about how a query may run: Python data sources allowed,
batches without data, classic or Connect. Read on the driver when a query starts; and
session settings changed for one call and put back."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark_dstl.core.errors import ConfigError

ARROW_RECORDS = "spark.sql.execution.arrow.maxRecordsPerBatch"


def arrow_record_limit(spark: Any) -> int:
    """Spark's limit of rows per Arrow batch (maxRecordsPerBatch); 0 when there is none
    (Spark reads 0 or less so), which PySpark's Python data sources and its
    createDataFrame(<Arrow table>) both refuse."""
    try:  # Spark knows the key and its default (it refuses a default given with get)
        raw = str(spark.conf.get(ARROW_RECORDS)).strip()
    except Exception:  # an older Spark without the key: Spark's default
        return 10000
    if not raw.lstrip("-").isdigit():
        raise ConfigError(f"{ARROW_RECORDS}={raw!r}: expected a whole number of rows; set "
                          "it to one (Spark's default is 10000)")
    return max(int(raw), 0)


def python_sources_allowed(spark: Any, what: str) -> bool:
    """PySpark's Python data sources refuse a maxRecordsPerBatch of 0 or less (no limit);
    without them, `what` is not available (a warning says so)."""
    if arrow_record_limit(spark) > 0:
        return True
    logging.getLogger(__name__).warning(
        "%s=%s: %s are off for this query (PySpark's Python data sources need a positive "
        "value)", ARROW_RECORDS, spark.conf.get(ARROW_RECORDS), what)
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
