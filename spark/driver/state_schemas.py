"""Settling a PySpark processor's state schemas with its checkpoint when a query starts.

On the driver, before any batch: the processor's declarations (from its init(), run on the
driver) are compared with every schema record of the chain the newest committed batch names
(the records: backend/lineage/schema_records.py; Spark's rules: codec/schema_history.py); a
change that could not read the stored values is refused with
StateSchemaError. A changed but compatible declaration gets a new record, written create-only
at `schemas/<operator>/<id>.json` with the next free id and the committed id as its base. The
tasks then write values with the new id and read each stored value with the schema of its own
id (codec/evolution.py); each commit entry names the id its batch wrote with
(`extra["state_schemas"]`), so a record no commit names (a start that crashed before its first
commit) is never part of a chain, and its id is never reused.

A checkpoint whose entries name no id holds values written before ids existed: its first start
here records the running processor's declarations as id 0, which is what those values mean.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from pyspark_dstl.backend.faults import kill_point
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.lineage.schema_records import (
    COMMIT_EXTRA,
    Declarations,
    SchemaHistory,
    SchemaRecord,
    chain_of,
    committed_schema_id,
    encode_record,
    read_records,
    record_path,
    records_prefix,
)
from pyspark_dstl.changelog.changelog_errors import (
    ChangelogError,
    ObjectExistsError,
    UploadFailedError,
)
from pyspark_dstl.materializer.remote import RemoteFiles
from pyspark_dstl.spark.codec.schema_history import check_against_history

if TYPE_CHECKING:
    from pyspark_dstl.spark.driver.operator import StatefulOperator
from pyspark_dstl.spark.spark_errors import StateSchemaError


def settle(storage: RemoteFiles, operator: str, declared: Declarations) -> SchemaHistory:
    """The history the next batch writes with; refuses declarations that cannot read the
    committed state, and records new ones. Needs the run's hold on the location (one writer)."""
    where = records_prefix(operator)
    latest = CommitLog(storage).latest()
    records = read_records(storage, operator)
    committed: int | None = None
    if latest is not None:
        committed = committed_schema_id(latest[1], operator)
        if committed is None:  # state written before schema ids: they are id 0
            if 0 not in records:
                return _record(storage, operator, records, SchemaRecord(
                    0, None, declared, int(time.time() * 1000)))
            committed = 0
    if committed is None:  # no committed state: nothing to be compatible with
        newest = max(records) if records else None
        if newest is not None and records[newest].base is None and \
                records[newest].same_declarations(declared):
            return chain_of(records, newest, operator)
        return _record(storage, operator, records, SchemaRecord(
            _next_id(records), None, declared, int(time.time() * 1000)))
    history = chain_of(records, committed, operator)
    check_against_history(history, declared, where)
    if records[committed].same_declarations(declared):
        return history
    newest = max(records)
    if newest != committed and records[newest].base == committed and \
            records[newest].same_declarations(declared):
        return chain_of(records, newest, operator)  # recorded by a start that did not commit
    return _record(storage, operator, records, SchemaRecord(
        _next_id(records), committed, declared, int(time.time() * 1000)))


def _next_id(records: Mapping[int, SchemaRecord]) -> int:
    return max(records) + 1 if records else 0


def _record(storage: RemoteFiles, operator: str, records: Mapping[int, SchemaRecord],
            record: SchemaRecord) -> SchemaHistory:
    path = record_path(operator, record.schema_id)
    try:
        storage.loop.run(storage.aput(path, encode_record(record)))
    except UploadFailedError as exc:
        if isinstance(exc.__cause__, ObjectExistsError):
            raise StateSchemaError(f"state schema record {path!r} was written by another run "
                                   f"at the same time; only one run may hold a checkpoint "
                                   f"(start again once it has stopped)") from exc
        raise StateSchemaError(f"state schema record {path!r}: cannot write it: "
                               f"{exc}") from exc
    except ChangelogError as exc:
        raise StateSchemaError(f"state schema record {path!r}: cannot write it: "
                               f"{exc}") from exc
    kill_point("schema_record_after")
    return chain_of({**records, record.schema_id: record}, record.schema_id, operator)


# ---- the operator's side ---------------------------------------------------------------------


def settle_operator(operator: StatefulOperator) -> SchemaHistory | None:
    """Settle the schemas of the operator's processor, if it declares any (a PySpark
    processor), and hand the history to it for its tasks."""
    processor = operator.spec.processor
    declared = getattr(processor, "declarations", None)
    if not isinstance(declared, Declarations):
        return None
    from pyspark_dstl.spark.driver import query_lease as fencing

    fencing.hold(operator).check("settle the state schemas")
    history = settle(operator._storage(), operator.spec.name, declared)
    cast(Any, processor).history = history  # a PySpark processor's adapter keeps it
    return history


def ensure_settled(operator: StatefulOperator) -> None:
    """Before a batch of an operator run without `start()` (run_batch, a Connect server's
    foreachBatch): settle once."""
    processor = operator.spec.processor
    if isinstance(getattr(processor, "declarations", None), Declarations) and \
            getattr(processor, "history", None) is None:
        settle_operator(operator)


def commit_extra(operator: StatefulOperator) -> dict[str, Any]:
    """What a commit entry records: the schema id its batch wrote with."""
    history = getattr(operator.spec.processor, "history", None)
    if not isinstance(history, SchemaHistory):
        return {}
    return {COMMIT_EXTRA: {operator.spec.name: history.current}}
