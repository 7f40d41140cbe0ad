"""The switch's hook on PySpark's DataFrameReader (classic and Spark Connect): installed once
however often `install()` runs, and given back exactly by `uninstall()`. What it routes is
compared with PySpark itself in tests/spark/readers/test_state_data_compare.py."""

from __future__ import annotations

import importlib

import pytest

import pyspark_dstl
from pyspark_dstl.spark.switch.switch import READER_CLASSES

READER_METHODS = {"pyspark.sql.readwriter": ("format", "option", "options", "load"),
                  "pyspark.sql.connect.readwriter": ("load",)}


def readers() -> list[type]:
    found = []
    for path in READER_CLASSES:
        module_name, class_name = path.split(":")
        try:
            found.append(getattr(importlib.import_module(module_name), class_name))
        except ImportError:  # Connect's client needs grpc
            continue
    return found


def test_install_wraps_the_readers_once_and_uninstall_gives_pysparks_methods_back() -> None:
    if pyspark_dstl.installed():
        pytest.skip("the switch is on for this process")
    own = {(cls, name): cls.__dict__[name] for cls in readers()
           for name in READER_METHODS[cls.__module__]}
    pyspark_dstl.install()
    try:
        wrapped = {key: key[0].__dict__[key[1]] for key in own}
        pyspark_dstl.install()
        assert {key: key[0].__dict__[key[1]] for key in own} == wrapped
        assert all(wrapped[key] is not method for key, method in own.items())
    finally:
        pyspark_dstl.uninstall()
    assert {key: key[0].__dict__[key[1]] for key in own} == own


def test_a_read_of_any_other_source_goes_straight_to_pyspark() -> None:
    from pyspark_dstl.spark.readers.routing import routed_read

    assert routed_read(None, "parquet", "/anywhere", {}) is None
    assert routed_read(None, "statestore", None, {}) is None  # no path: Spark's own error
    assert routed_read(None, "STATE-METADATA", ["/a", "/b"], {}) is None  # several paths
