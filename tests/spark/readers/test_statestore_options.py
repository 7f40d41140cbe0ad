"""Spark's `statestore` options as Spark 4.x parses them: any case, trimmed names, defaults,
and the first problem in Spark's order reported with Spark's condition and text. (The checks
that need committed batches are compared with PySpark itself in test_state_data_compare.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from pyspark_dstl.spark.readers.state_data_errors import StateDataSourceError
from pyspark_dstl.spark.readers.statestore_options import parse_options

PATH = {"path": "/somewhere"}


def error_of(**options: Any) -> StateDataSourceError:
    with pytest.raises(StateDataSourceError) as caught:
        parse_options({**PATH, **options})
    return caught.value


def test_defaults_are_sparks() -> None:
    parsed = parse_options({**PATH, "stateVarName": "count"})
    assert (parsed.operator_id, parsed.store_name, parsed.join_side, parsed.read_registered_timers,
            parsed.flatten_collection_types, parsed.change_range, parsed.snapshot) == (
        0, "default", "none", False, True, None, None)


def test_names_are_case_insensitive_and_names_of_variables_trimmed() -> None:
    parsed = parse_options({"PATH": "/x", "STATEVARNAME": "  cnt  ", "BatchId": "3",
                            "FLATTENCOLLECTIONTYPES": "FALSE"})
    assert (parsed.path, parsed.state_var_name, parsed.batch_id,
            parsed.flatten_collection_types) == ("/x", "cnt", 3, False)


def test_unknown_options_are_ignored_as_spark_ignores_them() -> None:
    assert parse_options({**PATH, "someUnknownOption": "x"}).state_var_name is None


@pytest.mark.parametrize(("options", "condition", "text"), [
    ({}, "STDS_REQUIRED_OPTION_UNSPECIFIED", "'path' must be specified."),
    ({"path": "/x", "operatorId": "-1"}, "STDS_INVALID_OPTION_VALUE.IS_NEGATIVE",
     "Invalid value for source option 'operatorId': cannot be negative."),
    ({"path": "/x", "storeName": "  "}, "STDS_INVALID_OPTION_VALUE.IS_EMPTY",
     "Invalid value for source option 'storeName': cannot be empty."),
    ({"path": "/x", "readRegisteredTimers": "maybe"}, "STDS_INVALID_OPTION_VALUE.WITH_MESSAGE",
     "Invalid value for source option 'readRegisteredTimers': Boolean value is expected"),
    ({"path": "/x", "stateVarName": "a", "readRegisteredTimers": "true"},
     "STDS_CONFLICT_OPTIONS", "The options ['readRegisteredTimers', 'stateVarName'] cannot "
                              "be specified together. Please specify the one."),
    ({"path": "/x", "flattenCollectionTypes": "maybe"},
     "STDS_INVALID_OPTION_VALUE.WITH_MESSAGE",
     "Invalid value for source option 'flattenCollectionTypes': Boolean value is expected"),
    ({"path": "/x", "joinSide": "middle"}, "STDS_INVALID_OPTION_VALUE.WITH_MESSAGE",
     "Invalid value for source option 'joinSide': Valid values are left,right,none"),
    ({"path": "/x", "joinSide": "left", "storeName": "other"}, "STDS_CONFLICT_OPTIONS",
     "The options ['joinSide', 'storeName'] cannot be specified together. Please specify "
     "the one."),
    ({"path": "/x", "readChangeFeed": "true", "batchId": "1"}, "STDS_CONFLICT_OPTIONS",
     "The options ['batchId', 'readChangeFeed'] cannot be specified together. Please specify "
     "the one."),
    ({"path": "/x", "readChangeFeed": "true", "snapshotStartBatchId": "0"},
     "STDS_CONFLICT_OPTIONS", "The options ['snapshotStartBatchId', 'readChangeFeed'] cannot "
                              "be specified together. Please specify the one."),
    ({"path": "/x", "readChangeFeed": "true"}, "STDS_REQUIRED_OPTION_UNSPECIFIED",
     "'changeStartBatchId' must be specified."),
    ({"path": "/x", "readChangeFeed": "true", "changeStartBatchId": "-1"},
     "STDS_INVALID_OPTION_VALUE.IS_NEGATIVE",
     "Invalid value for source option 'changeStartBatchId': cannot be negative."),
    ({"path": "/x", "readChangeFeed": "true", "changeStartBatchId": "2",
      "changeEndBatchId": "1"}, "STDS_INVALID_OPTION_VALUE.WITH_MESSAGE",
     "Invalid value for source option 'changeEndBatchId': changeEndBatchId cannot be smaller "
     "than changeStartBatchId. Please check the input to changeEndBatchId, or if you are "
     "using its default value, make sure that changeStartBatchId is less than 1."),
    ({"path": "/x", "changeStartBatchId": "0"}, "STDS_INVALID_OPTION_VALUE.WITH_MESSAGE",
     "Invalid value for source option 'changeStartBatchId': Only specify this option when "
     "readChangeFeed is set to true."),
    ({"path": "/x", "batchId": "-1"}, "STDS_INVALID_OPTION_VALUE.IS_NEGATIVE",
     "Invalid value for source option 'batchId': cannot be negative."),
    ({"path": "/x", "batchId": "1", "snapshotStartBatchId": "3", "snapshotPartitionId": "0"},
     "STDS_INVALID_OPTION_VALUE.WITH_MESSAGE",
     "Invalid value for source option 'snapshotStartBatchId': value should be less than or "
     "equal to 1"),
    ({"path": "/x", "snapshotPartitionId": "0"}, "STDS_REQUIRED_OPTION_UNSPECIFIED",
     "'snapshotStartBatchId' must be specified."),
    ({"path": "/x", "snapshotStartBatchId": "0"}, "STDS_REQUIRED_OPTION_UNSPECIFIED",
     "'snapshotPartitionId' must be specified."),
], ids=lambda value: value if isinstance(value, str) and value.startswith("STDS") else None)
def test_the_first_problem_in_sparks_order_is_reported_as_spark_reports_it(
        options: dict[str, str], condition: str, text: str) -> None:
    with pytest.raises(StateDataSourceError) as caught:
        parse_options(options)
    error = caught.value
    assert (error.getCondition(), error.text) == (condition, text)
    assert str(error) == f"[{condition}] {text} SQLSTATE: {error.getSqlState()}"


def test_a_value_that_is_not_a_number_names_the_option() -> None:
    error = error_of(batchId="abc")  # Spark: a bare NumberFormatException
    assert error.getCondition() == "STDS_INVALID_OPTION_VALUE.WITH_MESSAGE"
    assert error.text.startswith("Invalid value for source option 'batchId': For input "
                                 "string: \"abc\"")


def test_it_is_pysparks_runtime_exception_and_this_librarys_error() -> None:
    from pyspark.errors import SparkRuntimeException

    import pyspark_dstl

    error = error_of(operatorId="-2")
    assert isinstance(error, SparkRuntimeException)
    assert isinstance(error, pyspark_dstl.DstlError)
    assert error.getSqlState() == "42616"
