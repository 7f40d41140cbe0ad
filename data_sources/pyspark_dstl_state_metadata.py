"""PySpark finds the "dstl-state-metadata" source here: its data source lookup imports every
top-level module named `pyspark_*` with a `DefaultSource` (one per module; pyspark_dstl's is
"dstl-state")."""

from pyspark_dstl.spark.readers.state_metadata import StateMetadataSource as DefaultSource

__all__ = ["DefaultSource"]
