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
from typing import Any, Protocol, cast

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
from pyspark_dstl.spark.driver.query_lease import LeaseHolder, hold
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


class SchemaOwner(LeaseHolder, Protocol):
    """What settling needs of the query's operator (driver/operator.py): its first step, the
    steps chained after it, its location and storage. A protocol, so that the operator imports
    this module and not the other way round."""

    spec: Any
    chained: tuple[Any, ...]
    location: str
    _chain_checked: bool


def _processors(operator: SchemaOwner) -> list[tuple[str, Any]]:
    """(operator name, processor) of every operator of the query: the first stateful step
    and each step chained after it."""
    found = [(operator.spec.name, operator.spec.processor)]
    for chained in operator.chained:
        found.append((chained.name, chained.link.processor))
    return found


def settle_operator(operator: SchemaOwner) -> SchemaHistory | None:
    """Settle the schemas of every processor of the query that declares any (a PySpark
    processor: the first step, a chained transformWithState), hand each history to its
    processor for the tasks, and check that the chained steps' state is the recorded one.
    Returns the first step's history."""
    check_chain(operator)
    first: SchemaHistory | None = None
    for position, (name, processor) in enumerate(_processors(operator)):
        declared = getattr(processor, "declarations", None)
        if not isinstance(declared, Declarations):
            continue
        hold(operator).check("settle the state schemas")
        history = settle(operator._storage(), name, declared)
        cast(Any, processor).history = history  # a PySpark processor's adapter keeps it
        if position == 0:
            first = history
    return first


def ensure_settled(operator: SchemaOwner) -> None:
    """Before a batch of an operator run without `start()` (run_batch, a Connect server's
    foreachBatch): settle once."""
    unsettled = [processor for _, processor in _processors(operator)
                 if isinstance(getattr(processor, "declarations", None), Declarations)
                 and getattr(processor, "history", None) is None]
    if unsettled or not operator._chain_checked:
        settle_operator(operator)


def commit_extra(operator: SchemaOwner) -> dict[str, Any]:
    """What a commit entry records: the schema id each operator's batch wrote with."""
    ids = {name: processor.history.current for name, processor in _processors(operator)
           if isinstance(getattr(processor, "history", None), SchemaHistory)}
    return {COMMIT_EXTRA: ids} if ids else {}


def check_chain(operator: SchemaOwner) -> None:
    """The state of each chained step must be what the newest commit recorded for the
    operator of that name (its kind, keys and aggregate buffers): a query whose steps after
    the first changed would read one step's state as another's. Refused on the driver,
    before any batch, naming the step and the change."""
    chained = list(operator.chained)
    if not chained:
        return
    latest = CommitLog(operator._storage()).latest()
    records = {}
    if latest is not None:
        for record in latest[1].extra.get("chain") or []:
            if isinstance(record, Mapping):
                records[record.get("name")] = record
    for step in chained:
        recorded = records.get(step.name)
        if recorded is None:
            continue
        now = step.link.record.get("state")
        before = recorded.get("state")
        if now != before:
            raise StateSchemaError(
                f"{step.link.label}: operator {step.name!r} of checkpoint "
                f"{operator.location!r} holds the state of "
                f"{recorded.get('label', recorded.get('kind'))!r} ({_describe(before)}), not of "
                f"this step ({_describe(now)}): a changed step after the first one cannot read "
                f"the state of the old one; start the changed query on a new checkpoint "
                f"location (or restore the step as it was)")
    operator._chain_checked = True


def _describe(state: Any) -> str:
    if not isinstance(state, Mapping):
        return "no recorded layout"
    parts = [str(state.get("kind"))]
    if state.get("keys") is not None:
        parts.append(f"keys {state.get('keys')}")
    if state.get("aggregates") is not None:
        parts.append("aggregates " + ", ".join(f"{a[0]} as {a[1]}"
                                               for a in state.get("aggregates") or []))
    return "; ".join(parts)
