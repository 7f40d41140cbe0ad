"""Which reads of Spark's state data sources this backend answers, and how.

`spark.read.format("statestore" | "state-metadata").load(location)` resolves in the JVM,
which always finds Spark's own sources first (a Python source cannot take their names), so the
switch decides in Python, at `load()`: a read of one of Spark's state sources (by short name
in any case, or by class name) whose location holds this backend's checkpoint goes to this
backend's source of the same shape; everything else, Spark's own checkpoints included, goes
to Spark unchanged. A routed `statestore` read checks its options here first, so a bad
option fails at `load()` with Spark's error, as Spark's source fails there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pyspark_dstl.spark.pyspark_versions import register_data_source
from pyspark_dstl.spark.query_settings import DstlSettings
from pyspark_dstl.spark.readers import change_stream, state_metadata, statestore
from pyspark_dstl.spark.readers.state_location import holds_backend_checkpoint

STATESTORE_CLASS = "org.apache.spark.sql.execution.datasources.v2.state.StateDataSource"
METADATA_CLASS = ("org.apache.spark.sql.execution.datasources.v2.state.metadata."
                  "StateMetadataSource")
SPARK_STATE_SOURCES = {
    "statestore": statestore.SOURCE_NAME,
    STATESTORE_CLASS.lower(): statestore.SOURCE_NAME,
    "state-metadata": state_metadata.SOURCE_NAME,
    METADATA_CLASS.lower(): state_metadata.SOURCE_NAME,
}
SOURCES = (statestore.StateStoreSource, state_metadata.StateMetadataSource,
           change_stream.ChangeStreamSource)


def register_state_sources(spark: Any) -> None:
    """This backend's readers of state, by name, in `spark` (registering again replaces on
    PySpark 4.1+; 4.0 keeps the one its lookup found, this package's own)."""
    for source in SOURCES:
        register_data_source(spark, source)


def routed_read(spark: Any, source: str | None, path: Any,
                options: Mapping[str, Any]) -> tuple[str, dict[str, str]] | None:
    """(this backend's source, the options to add) for a read that should come here, or None
    for Spark's own source. `options` are the read's options so far (any case)."""
    if source is None or str(source).strip().lower() not in SPARK_STATE_SOURCES:
        return None
    if path is None:
        path = next((value for key, value in options.items() if str(key).lower() == "path"),
                    None)
    if not isinstance(path, str):
        return None  # no path, or several: Spark's source says what it says
    settings = DstlSettings.from_session(spark).backend_settings
    if not holds_backend_checkpoint(path, settings):
        return None
    target = SPARK_STATE_SOURCES[str(source).strip().lower()]
    extra = {statestore.SETTINGS_OPTION: json.dumps(dict(settings))}
    if target == statestore.SOURCE_NAME:
        statestore.StateStoreRead({**options, **extra, "path": path}, planned=False)
    register_state_sources(spark)
    return target, extra
