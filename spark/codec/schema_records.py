"""A checkpoint's state schema records in storage: `schemas/<operator>/<id>.json`, read
whole (each at most MAX_RECORD_BYTES), and the chain a commit entry names (commit entries
record the schema id their batch wrote with in `extra["state_schemas"]`)."""

from __future__ import annotations

import re

from pyspark_dstl.backend.lineage.commit_entry import CommitEntry
from pyspark_dstl.changelog.changelog_errors import ChangelogError
from pyspark_dstl.materializer.remote import RemoteFiles
from pyspark_dstl.spark.codec.schema_history import (
    MAX_RECORD_BYTES,
    SchemaHistory,
    SchemaRecord,
    chain_of,
    decode_record,
)
from pyspark_dstl.spark.spark_errors import StateSchemaError

SCHEMAS_PREFIX = "schemas"
COMMIT_EXTRA = "state_schemas"  # commit entry extra: operator -> the schema id it wrote with
_RECORD_NAME = re.compile(r"^(0|[1-9][0-9]{0,8})\.json$")


def records_prefix(operator: str) -> str:
    return f"{SCHEMAS_PREFIX}/{operator}/"


def committed_schema_id(entry: CommitEntry | None, operator: str) -> int | None:
    """The schema id the entry's batch wrote with; None without one (no entry, or an entry
    written before schema ids)."""
    if entry is None:
        return None
    named = (entry.extra.get(COMMIT_EXTRA) or {}).get(operator)
    return None if named is None else int(named)


def read_records(storage: RemoteFiles, operator: str) -> dict[int, SchemaRecord]:
    """Every schema record of the operator, by id (other names under the folder are not
    records and are left alone)."""
    prefix = records_prefix(operator)
    try:
        infos = storage.loop.run(storage.alist(prefix))
    except ChangelogError as exc:
        raise StateSchemaError(f"state schema records under {prefix!r}: cannot list them: "
                               f"{exc}") from exc
    records: dict[int, SchemaRecord] = {}
    for info in infos:
        name = info.path[len(prefix):] if info.path.startswith(prefix) else info.path
        match = _RECORD_NAME.match(name)
        if match is None:
            continue
        if info.size > MAX_RECORD_BYTES:
            raise StateSchemaError(f"state schema record {info.path!r}: {info.size} bytes, "
                                   f"more than a record may hold ({MAX_RECORD_BYTES})")
        try:
            data = storage.loop.run(storage.aget(info.path))
        except ChangelogError as exc:
            raise StateSchemaError(f"state schema record {info.path!r}: cannot read it: "
                                   f"{exc}") from exc
        record = decode_record(data, info.path)
        if record.schema_id != int(match.group(1)):
            raise StateSchemaError(f"state schema record {info.path!r} holds schema id "
                                   f"{record.schema_id}; the file was renamed or damaged")
        records[record.schema_id] = record
    return records


def history_at(storage: RemoteFiles, operator: str,
               entry: CommitEntry | None) -> SchemaHistory | None:
    """The schema history in force at a commit entry (None: the operator has no records);
    for readers of a batch."""
    records = read_records(storage, operator)
    if not records:
        return None
    schema_id = committed_schema_id(entry, operator)
    if schema_id is None:
        schema_id = 0 if 0 in records else None
    if schema_id is None:
        return None
    return chain_of(records, schema_id, records_prefix(operator))
