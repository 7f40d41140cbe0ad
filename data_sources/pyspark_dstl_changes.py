"""PySpark finds the "dstl-changes" source here: its data source lookup imports every top-level
module named `pyspark_*` with a `DefaultSource` (one per module; pyspark_dstl's is "dstl-
state")."""

from pyspark_dstl.spark.readers.change_stream import ChangeStreamSource as DefaultSource

__all__ = ["DefaultSource"]
