"""Spark lists a transformWithState operator's state variables in the order of its Scala hash
maps. The cases are orders PySpark 4.3.0 wrote for processors of these variables (declared in
the order given); the side-by-side tests compare whole operatorProperties strings too."""

from __future__ import annotations

import pytest

from pyspark_dstl.spark.readers.state_metadata import spark_variable_order


@pytest.mark.parametrize(("declared", "sparks"), [
    (["cnt", "cntTtl", "shortTtl", "items", "itemsTtl", "m", "mTtl",
      "$procTimers_keyToTimestamp"],
     ["mTtl", "itemsTtl", "items", "shortTtl", "m", "cntTtl", "cnt",
      "$procTimers_keyToTimestamp"]),
    (["brief", "lasting", "history", "tags", "$procTimers_keyToTimestamp"],
     ["lasting", "history", "tags", "brief", "$procTimers_keyToTimestamp"]),
    (["total", "hist"], ["hist", "total"]),
    (["maxTs", "$eventTimers_keyToTimestamp"], ["$eventTimers_keyToTimestamp", "maxTs"]),
    (["count", "newest", "$eventTimers_keyToTimestamp"],
     ["count", "newest", "$eventTimers_keyToTimestamp"]),
    (["count", "seeded"], ["count", "seeded"]),
], ids=["eight", "five", "two-in-one-bucket", "two", "three-in-one-bucket", "two-apart"])
def test_variables_are_listed_in_sparks_order(declared: list[str], sparks: list[str]) -> None:
    assert spark_variable_order(declared) == sparks
    assert spark_variable_order(list(reversed(declared))) == sparks
