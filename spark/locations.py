"""Checkpoint locations as URLs: what users write (local paths, Hadoop's `file:/path`,
`s3://...`) becomes the one URL form the storage layer opens, and a mistyped scheme is refused
before it can create a local folder named after it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.spark.query_settings import QUERY_PREFIX

ENGINE_SETTING = QUERY_PREFIX + "engineCheckpointLocation"


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


def default_engine_checkpoint(location: str, also: str = "") -> str:
    """`<location>/engine` for a local location. Spark writes its engine checkpoint through
    Hadoop, which has no file system for `s3://` (and `s3a://` needs the hadoop-aws jar and its
    own credentials): any other location must name the engine checkpoint itself. `also` names
    another way to give it than the setting (the builder's start keyword)."""
    if not location.startswith("file://"):
        scheme, _, rest = location.partition("://")
        example = (f"s3a://{rest}-engine" if scheme.lower() in ("s3", "s3a", "s3n")
                   else "<a path every node shares>")
        raise ConfigError(
            f"{ENGINE_SETTING}: the checkpoint location {location!r} is not local, and "
            f"Spark writes its engine checkpoint (offsets, commits) through Hadoop; give it "
            f"before start() with spark.conf.set(\"{ENGINE_SETTING}\", \"{example}\")"
            f"{also} (an s3a:// location needs the hadoop-aws jar; a local or shared path "
            f"works too)")
    return location + "/engine"
