"""What differs between the PySpark versions this package supports (4.0 to 4.3), in one place.

Every difference the package meets is here: detected from PySpark itself (a module, a method,
a parameter) where the code that needs it runs, or read from the session's Spark version where
Spark's engine decides (a Spark Connect client may run another PySpark than its server). A
feature a version lacks is refused here by name, with the version and what to use instead; the
version itself is never refused. docs/deploying.md ("Supported PySpark versions") is the table
of these facts, and `scripts/run_version_tier.sh` runs the tests marked `version` on each.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark_dstl.spark.spark_errors import PySparkVersionAttributeError, PySparkVersionError

# the latest patch of each supported minor version: CI runs the version tier on each
TESTED_VERSIONS = ("4.0.5", "4.1.4", "4.2.1", "4.3.0")

# Spark gives a Python streaming source Trigger.AvailableNow (pyspark.sql.streaming.datasource:
# SupportsTriggerAvailableNow, and latestOffset(start, limit)) from 4.2 on; before, an
# availableNow query with such a source runs as one batch and no batch without input after it
PYTHON_SOURCES_AVAILABLE_NOW = (4, 2)
# GroupedData.transformWithState (the Row API) from 4.1 on (4.0 has transformWithStateInPandas)
ROW_TRANSFORM_WITH_STATE = (4, 1)
# Spark Connect's client GroupedData has transformWithStateInPandas and transformWithState
# from 4.1 on (4.0's has neither)
CONNECT_TRANSFORM_WITH_STATE = (4, 1)
# Spark's streaming file sink: in package ...streaming.sinks since 4.1, ...streaming in 4.0
FILE_STREAM_SINK_CLASSES = ("org.apache.spark.sql.execution.streaming.sinks.FileStreamSink",
                            "org.apache.spark.sql.execution.streaming.FileStreamSink")
ALREADY_REGISTERED = "DATA_SOURCE_ALREADY_EXISTS"


def version_of(text: str) -> tuple[int, int]:
    """(major, minor) of a version string such as '4.1.4' or '4.2.0.dev0'."""
    found = re.match(r"^(\d+)\.(\d+)", text.strip())
    if found is None:
        raise PySparkVersionError(f"PySpark version {text!r}: not a version number")
    return int(found.group(1)), int(found.group(2))


def pyspark_version() -> str:
    """The PySpark this process imports."""
    import pyspark

    return str(pyspark.__version__)


def engine_version(spark: Any) -> str:
    """The Spark that runs the session's queries: the server's, on Spark Connect."""
    return str(spark.version)


# --- Python streaming sources ------------------------------------------------------------------


def available_now_mixin() -> type:
    """PySpark's SupportsTriggerAvailableNow (4.2+), or an empty class that stands in for it
    where PySpark has none and never asks for it."""
    try:
        from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
    except ImportError:
        return _NoTriggerAvailableNow
    return SupportsTriggerAvailableNow


class _NoTriggerAvailableNow:
    """Stands in for SupportsTriggerAvailableNow before PySpark 4.2."""


def python_sources_run_available_now(spark: Any) -> bool:
    """Whether the session's Spark runs a Python streaming source under Trigger.AvailableNow
    (4.2+); PySpark's own module for it must be importable here too."""
    return (version_of(engine_version(spark)) >= PYTHON_SOURCES_AVAILABLE_NOW
            and importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None)


def refuse_available_now_with_timers(spark: Any, trigger: Mapping[str, Any] | None,
                                     time_mode: str) -> None:
    """Timers and the watermark reach this backend through a Python streaming source (the tick
    source); before Spark 4.2 Spark runs such a query under availableNow as one batch with all
    the input and no batch without input after it, so no timer the input makes due would fire:
    refused before anything is written, with what to use instead."""
    if not trigger or not trigger.get("availableNow") or python_sources_run_available_now(spark):
        return
    raise PySparkVersionError(
        f"trigger(availableNow=True) with timeMode {time_mode!r}: Spark "
        f"{engine_version(spark)} runs the Python streaming source that brings this backend its "
        f"timers and watermark batches as one batch with all the input and no batch after it "
        f"(Spark {_dotted(PYTHON_SOURCES_AVAILABLE_NOW)} runs it batch by batch); use "
        f"trigger(processingTime='0 seconds') with query.processAllAvailable() and "
        f"query.stop(), or PySpark {_dotted(PYTHON_SOURCES_AVAILABLE_NOW)}+")


# --- methods of PySpark's GroupedData ---------------------------------------------------------


def missing_transform_method(module: str, name: str) -> PySparkVersionAttributeError:
    """The error for a transformWithState method that the installed PySpark's GroupedData of
    `module` (classic or Spark Connect) lacks."""
    version = pyspark_version()
    if module.startswith("pyspark.sql.connect"):
        return PySparkVersionAttributeError(
            f"{name}: PySpark {version}'s Spark Connect client has no {name} (PySpark "
            f"{_dotted(CONNECT_TRANSFORM_WITH_STATE)} has it); run the query in a classic "
            f"session, use the builder (pyspark_dstl.stateful(df).group_by(...)."
            f"{name}(...), which runs through Spark Connect), or PySpark "
            f"{_dotted(CONNECT_TRANSFORM_WITH_STATE)}+")
    return PySparkVersionAttributeError(
        f"{name}: PySpark {version} has no Row-based {name} (PySpark "
        f"{_dotted(ROW_TRANSFORM_WITH_STATE)} has it); use transformWithStateInPandas, the "
        f"builder (pyspark_dstl.stateful(df).group_by(...).{name}(...), which runs Row "
        f"processors on this PySpark), or PySpark {_dotted(ROW_TRANSFORM_WITH_STATE)}+")


# --- Arrow schemas ----------------------------------------------------------------------------


def arrow_schema(schema: Any, zone: str) -> Any:
    """Spark's Arrow schema of `schema`, its timestamps in the session's time zone `zone`
    (PySpark 4.2+ takes the zone; 4.0 and 4.1 give UTC, re-zoned here)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone=zone)
    in_utc = to_arrow_schema(schema, timestamp_utc=True)  # type: ignore[call-arg]
    return pa.schema([field.with_type(_in_zone(field.type, zone)) for field in in_utc])


def _in_zone(kind: Any, zone: str) -> Any:
    import pyarrow as pa

    if pa.types.is_timestamp(kind) and kind.tz is not None:
        return pa.timestamp(kind.unit, tz=zone)
    if pa.types.is_struct(kind):
        return pa.struct([kind.field(i).with_type(_in_zone(kind.field(i).type, zone))
                          for i in range(kind.num_fields)])
    if pa.types.is_map(kind):
        return pa.map_(kind.key_field.with_type(_in_zone(kind.key_type, zone)),
                       kind.item_field.with_type(_in_zone(kind.item_type, zone)))
    if pa.types.is_large_list(kind):
        return pa.large_list(kind.value_field.with_type(_in_zone(kind.value_type, zone)))
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_in_zone(kind.value_type, zone)))
    return kind


# --- Spark's classes and registries -----------------------------------------------------------


def register_data_source(spark: Any, source: type) -> None:
    """spark.dataSource.register(source). PySpark 4.0 refuses a name its data source lookup
    already registered from an installed pyspark_* package's DefaultSource (this package's
    own; readers/discovery.py warns when it is another copy); 4.1+ replaces it."""
    try:
        spark.dataSource.register(source)
    except Exception as exc:
        if ALREADY_REGISTERED not in str(exc):
            raise


def java_class(jvm: Any, names: Sequence[str]) -> Any:
    """The first class of `names` the driver's JVM has (py4j answers a missing class with a
    package, which cannot be called)."""
    from py4j.java_gateway import JavaClass

    for name in names:
        found = jvm
        for part in name.split("."):
            found = getattr(found, part)
        if isinstance(found, JavaClass):
            return found
    raise PySparkVersionError(f"none of {', '.join(names)} is on the driver's classpath "
                              f"(Spark {pyspark_version()}); this package supports PySpark "
                              f"{TESTED_VERSIONS[0]} to {TESTED_VERSIONS[-1]}")


def _dotted(version: tuple[int, int]) -> str:
    return ".".join(map(str, version))
