"""State schema records: the file format, reading them from storage, and the chain a commit
entry names. The one home of the format (docs/formats.md, "State schema records"); the rules
that decide which declarations may read a record's values are Spark's and live in
spark/codec/schema_history.py. Nothing here needs pyspark: schemas stay StructType JSON text.

`schemas/<operator>/<id>.json` holds every state variable a processor declared at one start
(kind, value schema, map key schema, TTL or not) and the grouping key's schema, and names the
id it was checked against (its base); each commit entry records the id its batch wrote with
in `extra["state_schemas"]`, so the ids a committed batch's values may carry form one chain.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_dstl.backend.backend_errors import SchemaRecordError
from pyspark_dstl.backend.lineage.commit_entry import CommitEntry
from pyspark_dstl.changelog.changelog_errors import ChangelogError
from pyspark_dstl.changelog.storage.base import ObjectInfo
from pyspark_dstl.core.checksummed_json import RecordKind
from pyspark_dstl.core.errors import excerpt
from pyspark_dstl.materializer.remote import RemoteFiles

PREFIX = "schemas/"
MAGIC = "DSTL-STATE-SCHEMA"
FORMAT_VERSION = 1
MAX_RECORD_BYTES = 16 * 1024 * 1024  # a record is read whole: refuse anything larger
RECORD = RecordKind("state schema record", (MAGIC,), "record", FORMAT_VERSION,
                    SchemaRecordError, MAX_RECORD_BYTES)
COMMIT_EXTRA = "state_schemas"  # commit entry extra: operator -> the schema id it wrote with
_NAME = re.compile(r"^([^/]+)/(0|[1-9][0-9]{0,8})\.json$")  # below PREFIX: operator/id.json


@dataclass(frozen=True)
class StateDeclaration:
    """One state variable as init() declared it; schemas as StructType JSON."""

    kind: str  # "value", "list" or "map"
    value_schema: str
    key_schema: str | None = None  # a map state's user key
    ttl: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "value_schema": json.loads(self.value_schema),
                "key_schema": None if self.key_schema is None else json.loads(self.key_schema),
                "ttl": self.ttl}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StateDeclaration:
        kind = str(data["kind"])
        if kind not in ("value", "list", "map"):
            raise ValueError(f"unknown state kind {kind!r}")
        key = data.get("key_schema")
        return cls(kind, canonical_json(data["value_schema"]),
                   None if key is None else canonical_json(key), bool(data["ttl"]))


@dataclass(frozen=True)
class Declarations:
    """What one start declares: the grouping key's schema and every state variable."""

    grouping_key: str  # StructType JSON of the grouping columns
    variables: Mapping[str, StateDeclaration] = field(default_factory=dict)


@dataclass(frozen=True)
class SchemaRecord:
    """Schema id `schema_id`: the declarations of one start, checked against `base` (None:
    the first record of the checkpoint)."""

    schema_id: int
    base: int | None
    declarations: Declarations
    created_ms: int = 0

    def same_declarations(self, other: Declarations) -> bool:
        return self.declarations == other

    def to_dict(self) -> dict[str, Any]:
        return {"schema_id": self.schema_id, "base": self.base, "created_ms": self.created_ms,
                "grouping_key": json.loads(self.declarations.grouping_key),
                "variables": {name: d.to_dict()
                              for name, d in sorted(self.declarations.variables.items())}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SchemaRecord:
        base = data.get("base")
        variables = {str(name): StateDeclaration.from_dict(d)
                     for name, d in dict(data["variables"]).items()}
        return cls(_whole(data["schema_id"]), None if base is None else _whole(base),
                   Declarations(canonical_json(data["grouping_key"]), variables),
                   int(data.get("created_ms", 0)))


@dataclass(frozen=True)
class SchemaHistory:
    """The schema id values are written with now, and every record of its chain (the ids
    stored values of committed batches may carry), by id."""

    current: int
    records: Mapping[int, SchemaRecord]

    def chain(self) -> Iterator[SchemaRecord]:
        """Newest first."""
        schema_id: int | None = self.current
        while schema_id is not None:
            record = self.records[schema_id]
            yield record
            schema_id = record.base

    def to_dict(self) -> dict[str, Any]:
        return {"current": self.current,
                "records": [r.to_dict() for r in self.chain()]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SchemaHistory:
        records = [SchemaRecord.from_dict(r) for r in data["records"]]
        return cls(int(data["current"]), {r.schema_id: r for r in records})


def encode_record(record: SchemaRecord) -> bytes:
    return RECORD.encode(record.to_dict())


def decode_record(data: bytes, path: str) -> SchemaRecord:
    """A schema record; SchemaRecordError naming the file when it is damaged or foreign."""
    return RECORD.decode_as(data, path, lambda _, body: SchemaRecord.from_dict(body))


def records_prefix(operator: str) -> str:
    return f"{PREFIX}{operator}/"


def record_path(operator: str, schema_id: int) -> str:
    return f"{records_prefix(operator)}{schema_id}.json"


def committed_schema_id(entry: CommitEntry | None, operator: str) -> int | None:
    """The schema id the entry's batch wrote with; None without one (no entry, or an entry
    written before schema ids)."""
    if entry is None:
        return None
    named = (entry.extra.get(COMMIT_EXTRA) or {}).get(operator)
    return None if named is None else int(named)


RecordFiles = dict[str, dict[int, ObjectInfo]]  # operator -> schema id -> file


def record_files(storage: RemoteFiles, operator: str | None = None) -> RecordFiles:
    """operator -> schema id -> file of every record (of one operator, or of all); other names
    under the folder are not records and are left alone."""
    listed = PREFIX if operator is None else records_prefix(operator)
    try:
        infos = storage.loop.run(storage.alist(listed))
    except ChangelogError as exc:
        raise SchemaRecordError(f"state schema records under {listed!r}: cannot list them: "
                                f"{excerpt(exc)}") from exc
    found: dict[str, dict[int, ObjectInfo]] = {}
    for info in infos:
        match = _NAME.match(info.path[len(PREFIX):]) if info.path.startswith(PREFIX) else None
        if match is not None and (operator is None or match[1] == operator):
            found.setdefault(match[1], {})[int(match[2])] = info
    return found


def read_record(storage: RemoteFiles, info: ObjectInfo, schema_id: int) -> SchemaRecord:
    """The record in `info`'s file, which its name says holds `schema_id`."""
    if info.size > MAX_RECORD_BYTES:
        raise SchemaRecordError(f"state schema record {info.path!r}: {info.size} bytes, more "
                                f"than a record may hold ({MAX_RECORD_BYTES})")
    try:
        data = storage.loop.run(storage.aget(info.path))
    except ChangelogError as exc:
        raise SchemaRecordError(f"state schema record {info.path!r}: cannot read it: "
                                f"{excerpt(exc)}") from exc
    record = decode_record(data, info.path)
    if record.schema_id != schema_id:
        raise SchemaRecordError(f"state schema record {info.path!r} holds schema id "
                                f"{record.schema_id}; the file was renamed or damaged")
    return record


def read_records(storage: RemoteFiles, operator: str) -> dict[int, SchemaRecord]:
    """Every schema record of the operator, by id."""
    files = record_files(storage, operator).get(operator, {})
    return {schema_id: read_record(storage, info, schema_id)
            for schema_id, info in sorted(files.items())}


def chain_of(records: Mapping[int, SchemaRecord], schema_id: int,
             operator: str) -> SchemaHistory:
    """The history of `schema_id`, every record of its chain present (else SchemaRecordError
    naming the missing file)."""
    seen: set[int] = set()
    step: int | None = schema_id
    while step is not None:
        if step in seen:
            raise SchemaRecordError(f"state schema records under {records_prefix(operator)!r}: "
                                    f"schema id {step} is its own ancestor; the records are "
                                    f"damaged")
        seen.add(step)
        record = records.get(step)
        if record is None:
            raise SchemaRecordError(f"state schema record {record_path(operator, step)!r} is "
                                    f"missing, but the committed state refers to it (through "
                                    f"schema id {schema_id}); restore the file from a backup")
        step = record.base
    return SchemaHistory(schema_id, {i: records[i] for i in seen})


def committed_chain_start(records: Mapping[int, SchemaRecord], entry: CommitEntry | None,
                          operator: str) -> int | None:
    """The schema id the entry's batch reads its values through: the one it names, or 0 for
    an entry written before schema ids (its values carry none and mean id 0)."""
    named = committed_schema_id(entry, operator)
    if named is None and entry is not None and 0 in records:
        return 0
    return named


def history_at(storage: RemoteFiles, operator: str, entry: CommitEntry) -> SchemaHistory | None:
    """The schema history in force at a commit entry (None: the operator has no records, or
    the entry reads through none); for readers of a batch."""
    records = read_records(storage, operator)
    schema_id = committed_chain_start(records, entry, operator)
    return None if schema_id is None else chain_of(records, schema_id, operator)


def canonical_json(value: Any) -> str:
    """A schema's JSON in one spelling (so equal schemas compare equal as text)."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        raise ValueError(f"a schema must be a JSON object, got {excerpt(value)}")
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"a schema id must be a whole number, got {excerpt(value)}")
    return value
