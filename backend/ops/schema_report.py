"""What `inspect` and `verify` show of a checkpoint's state schema records: each operator's
records, which one the newest commit names and the chain it reads through, and every state
variable's schema per record, as text. The records are read through their format's home
(backend/lineage/schema_records.py), without pyspark; a damaged record is a problem reported,
never raised to the caller."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pyspark_dstl.backend.backend_errors import SchemaRecordError
from pyspark_dstl.backend.lineage.commit_entry import CommitEntry
from pyspark_dstl.backend.lineage.schema_records import (
    SchemaRecord,
    StateDeclaration,
    chain_of,
    committed_chain_start,
    read_record,
    record_files,
)
from pyspark_dstl.materializer.remote import RemoteFiles

_DDL_NAMES = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}


def describe_schema_records(storage: RemoteFiles, latest: CommitEntry | None,
                            problems: list[str]) -> dict[str, Any]:
    """operator -> {"committed": id or None, "chain": [ids, newest first], "records":
    [{id, base, created_ms, variables: {name: text}}]}; damaged records go to `problems`."""
    report: dict[str, Any] = {}
    for operator, records in sorted(_readable_records(storage, problems).items()):
        committed = committed_chain_start(records, latest, operator)
        report[operator] = {
            "committed": committed,
            "chain": _chain(records, committed),
            "records": [{"id": i, "base": r.base, "created_ms": r.created_ms,
                         "variables": {name: _variable(v) for name, v
                                       in sorted(r.declarations.variables.items())}}
                        for i, r in sorted(records.items())],
        }
    return report


def schema_record_problems(storage: RemoteFiles, latest: CommitEntry | None) -> list[str]:
    """For `verify`: damaged records, and a record missing from the chain the newest commit
    reads its state schemas through."""
    problems: list[str] = []
    found = _readable_records(storage, problems)
    named = dict((latest.extra.get("state_schemas") or {}) if latest is not None else {})
    for operator in sorted(set(found) | set(named)):
        records = found.get(operator, {})
        committed = committed_chain_start(records, latest, operator)
        if committed is None:
            continue
        try:
            chain_of(records, committed, operator)
        except SchemaRecordError as exc:
            problems.append(str(exc))
    return problems


def format_schema_records(report: Mapping[str, Any]) -> list[str]:
    lines = []
    for operator, described in report.items():
        chain = " -> ".join(str(i) for i in described["chain"]) or "(none committed)"
        lines.append(f"state schemas of operator {operator}: committed id "
                     f"{described['committed']}, read through {chain}")
        in_chain = set(described["chain"])
        for record in described["records"]:
            note = "" if record["id"] in in_chain else " (no commit names it: not used)"
            lines.append(f"  id {record['id']} (base {record['base']}){note}")
            lines.extend(f"    {name}: {text}" for name, text in record["variables"].items())
    return lines


def _readable_records(storage: RemoteFiles,
                      problems: list[str]) -> dict[str, dict[int, SchemaRecord]]:
    """operator -> id -> record of every record that reads; the others go to `problems`."""
    try:
        files = record_files(storage)
    except SchemaRecordError as exc:
        problems.append(str(exc))
        return {}
    found: dict[str, dict[int, SchemaRecord]] = {}
    for operator, by_id in files.items():
        for schema_id, info in sorted(by_id.items()):
            try:
                found.setdefault(operator, {})[schema_id] = read_record(storage, info,
                                                                        schema_id)
            except SchemaRecordError as exc:
                problems.append(str(exc))
    return found


def _chain(records: Mapping[int, SchemaRecord], start: int | None) -> list[int]:
    chain: list[int] = []
    step = start
    while step is not None and step in records and step not in chain:
        chain.append(step)
        step = records[step].base
    return chain


def _variable(declared: StateDeclaration) -> str:
    text = f"{declared.kind} state"
    if declared.key_schema is not None:
        text += f", key <{_type(json.loads(declared.key_schema))}>"
    text += f", value <{_type(json.loads(declared.value_schema))}>"
    return text + (", with TTL" if declared.ttl else "")


def _type(schema: Any, top: bool = True) -> str:
    """A Spark type's JSON as DDL-like text (the top struct's fields without struct<>)."""
    if isinstance(schema, str):
        return _DDL_NAMES.get(schema, schema)
    if not isinstance(schema, dict):
        return "?"
    kind = schema.get("type")
    if kind == "struct":
        fields = ", ".join(f"{f.get('name')} {_type(f.get('type'), False)}"
                           + ("" if f.get("nullable", True) else " not null")
                           for f in schema.get("fields", []))
        return fields if top else f"struct<{fields}>"
    if kind == "array":
        return f"array<{_type(schema.get('elementType'), False)}>"
    if kind == "map":
        return (f"map<{_type(schema.get('keyType'), False)}, "
                f"{_type(schema.get('valueType'), False)}>")
    return str(kind)
