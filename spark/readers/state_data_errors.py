"""The errors of Spark's state data sources, raised by this backend's readers of them.

Spark's `statestore` and `state-metadata` sources report bad options and missing batches with
error conditions (`STDS_*`, `CANNOT_LOAD_STATE_STORE.*`). Where this backend knows the same
condition, its readers raise `StateDataSourceError` with Spark's condition, SQLSTATE and
first line, so code that catches PySpark's `SparkRuntimeException` or checks
`getCondition()` keeps working after a query moved here. Where Spark's own message says
little (a bare `NumberFormatException`, `requirement failed`), the condition is Spark's
closest one and the message names the option and the fix: docs/state-data.md lists each.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.errors import SparkRuntimeException

from pyspark_dstl.spark.spark_errors import DstlSparkError

REQUIRED = "STDS_REQUIRED_OPTION_UNSPECIFIED"
NEGATIVE = "STDS_INVALID_OPTION_VALUE.IS_NEGATIVE"
EMPTY = "STDS_INVALID_OPTION_VALUE.IS_EMPTY"
INVALID = "STDS_INVALID_OPTION_VALUE.WITH_MESSAGE"
CONFLICT = "STDS_CONFLICT_OPTIONS"
NO_COMMITTED_BATCH = "STDS_COMMITTED_BATCH_UNAVAILABLE"
NO_OPERATOR_METADATA = "STDS_FAILED_TO_READ_OPERATOR_METADATA"
NO_STATE_SCHEMA = "STDS_FAILED_TO_READ_STATE_SCHEMA"
NO_PARTITION = "CANNOT_LOAD_STATE_STORE.SNAPSHOT_PARTITION_ID_NOT_FOUND"
RESERVED_NAME = "STATE_STORE_CANNOT_CREATE_COLUMN_FAMILY_WITH_RESERVED_CHARS"
SQL_STATES = {REQUIRED: "42601", NEGATIVE: "42616", EMPTY: "42616", INVALID: "42616",
              CONFLICT: "42613", NO_COMMITTED_BATCH: "KD006", NO_OPERATOR_METADATA: "42K03",
              NO_STATE_SCHEMA: "42K03", NO_PARTITION: "58030", RESERVED_NAME: "42802"}


class StateDataSourceError(DstlSparkError, SparkRuntimeException):
    """A read of Spark's state data sources on this backend's checkpoint failed as Spark's
    would: `getCondition()` and `getSqlState()` are Spark's, `str()` is Spark's text."""

    def __init__(self, condition: str, text: str, parameters: dict[str, str] | None = None,
                 detail: str | None = None) -> None:
        self.condition = condition
        self.text = text  # Spark's message
        self.detail = detail  # what this backend adds, on the lines after Spark's
        self.sql_state = SQL_STATES[condition]
        SparkRuntimeException.__init__(self, message=self._message_text(),
                                       errorClass=condition, messageParameters=parameters or {})

    def _message_text(self) -> str:
        return f"{self.text} SQLSTATE: {self.sql_state}" + (
            f"\n{self.detail}" if self.detail else "")

    def getSqlState(self) -> str:
        return self.sql_state

    def __str__(self) -> str:
        return f"[{self.condition}] {self._message_text()}"

    def __reduce__(self) -> tuple[type, tuple[str, str, dict[str, str], str | None]]:
        return type(self), (self.condition, self.text, dict(self._messageParameters or {}),
                            self.detail)


def required(option: str) -> StateDataSourceError:
    return StateDataSourceError(REQUIRED, f"'{option}' must be specified.",
                                {"optionName": option})


def negative(option: str) -> StateDataSourceError:
    return StateDataSourceError(NEGATIVE, f"Invalid value for source option '{option}': "
                                          f"cannot be negative.", {"optionName": option})


def empty(option: str) -> StateDataSourceError:
    return StateDataSourceError(EMPTY, f"Invalid value for source option '{option}': cannot "
                                       f"be empty.", {"optionName": option})


def invalid(option: str, message: str) -> StateDataSourceError:
    return StateDataSourceError(INVALID, f"Invalid value for source option '{option}': "
                                         f"{message}", {"optionName": option,
                                                        "message": message})


def conflict(options: Sequence[str]) -> StateDataSourceError:
    shown = "[" + ", ".join(f"'{name}'" for name in options) + "]"
    return StateDataSourceError(CONFLICT, f"The options {shown} cannot be specified together. "
                                          f"Please specify the one.", {"options": shown})


def no_committed_batch(location: str, why: str | None = None) -> StateDataSourceError:
    """Spark's line, then (this backend knows more) why the batch is not there."""
    return StateDataSourceError(
        NO_COMMITTED_BATCH,
        f"No committed batch found, checkpoint location: {location}. Ensure that the query "
        f"has run and committed any microbatch before stopping.",
        {"checkpointLocation": location}, detail=why)


def no_operator_metadata(location: str, batch_id: int) -> StateDataSourceError:
    return StateDataSourceError(
        NO_OPERATOR_METADATA,
        f"Failed to read the operator metadata for checkpointLocation={location} and "
        f"batchId={batch_id}.\nEither the file does not exist, or the file is corrupted.\n"
        f"Rerun the streaming query to construct the operator metadata, and report to the "
        f"corresponding communities or vendors if the error persists.",
        {"checkpointLocation": location, "batchId": str(batch_id)})


def no_state_schema(described_options: str, why: str) -> StateDataSourceError:
    return StateDataSourceError(
        NO_STATE_SCHEMA,
        f"Failed to read the state schema. Either the file does not exist, or the file is "
        f"corrupted. options: {described_options}.\n{why}",
        {"sourceOptions": described_options})


def no_partition(partition: int, operator_id: int, location: str) -> StateDataSourceError:
    return StateDataSourceError(
        NO_PARTITION,
        f"An error occurred during loading state. Partition id {partition} not found for "
        f"state of operator {operator_id} at {location}/state.",
        {"snapshotPartitionId": str(partition), "operatorId": str(operator_id),
         "checkpointLocation": location})


def reserved_name(name: str) -> StateDataSourceError:
    return StateDataSourceError(
        RESERVED_NAME,
        f"Failed to create column family with unsupported starting character and "
        f"name={name}.", {"colFamilyName": name})
