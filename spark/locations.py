"""Checkpoint locations as URLs: what users write (local paths, Hadoop's `file:/path`,
`s3://...`) becomes the one URL form the storage layer opens, and a mistyped scheme is refused
before it can create a local folder named after it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.spark.query_settings import QUERY_PREFIX


def to_url(location: str) -> str:
    """A checkpoint URL: URLs stay as they are, local paths become file:// URLs. A URL with one
    slash after its scheme (`s3:/bucket`) is refused: read as a local path it would create a
    folder named `s3:` in the working directory."""
    if re.match(r"^file:/(?!/)", location):  # Hadoop's spelling of a local path
        location = "file://" + location[len("file:"):]
    mistyped = re.match(r"^([A-Za-z][A-Za-z0-9+.-]+):/(?!/)", location)
    if mistyped:
        scheme = mistyped.group(1)
        raise ConfigError(f"{QUERY_PREFIX}checkpointLocation: {location!r} has one slash after "
                          f"'{scheme}:'; write {scheme}://{location[len(scheme) + 2:]}")
    if "://" in location:
        return location.rstrip("/")
    return Path(os.path.abspath(os.path.expanduser(location))).as_uri()


def default_engine_checkpoint(location: str) -> str:
    """`<location>/engine`, for a local checkpoint location (the URL `to_url` gives)."""
    if not location.startswith("file://"):
        raise ConfigError(f"{QUERY_PREFIX}engineCheckpointLocation: the checkpoint location "
                          f"{location!r} is not local; give the engine checkpoint's location "
                          f"(engine_checkpoint=... or this setting)")
    return location + "/engine"
