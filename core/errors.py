"""The one exception root of pyspark-dstl, and the configuration error every package raises.

Each package derives its own errors from `DstlError` (changelog: `ChangelogError`, materializer:
`MaterializerError`, backend: `BackendError`), so a caller that wants "anything this library
raised" catches one type, and a caller that wants one package's failures catches that root.
"""

from __future__ import annotations


class DstlError(Exception):
    """Root of every error pyspark-dstl raises."""


class ConfigError(DstlError, ValueError):
    """A setting has an invalid value; the message starts with the setting's key."""


class LoopClosedError(DstlError):
    """Work was handed to an event loop thread that is closed (its owner was closed)."""


class LoopUsageError(DstlError):
    """A blocking call was made from the loop's own thread, which would deadlock."""
