"""The shared core every package imports: the error root, settings and units, the event loop."""

from pyspark_dstl.core.errors import ConfigError, DstlError

__all__ = ["ConfigError", "DstlError"]
