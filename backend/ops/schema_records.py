"""What `inspect` shows of a checkpoint's state schema records (`schemas/<operator>/<id>.json`,
written by backend/spark when a PySpark processor's query starts): each operator's records,
which one the newest commit names and the chain it reads through, and every state variable's
schema per record. Read here without pyspark: the record format is in docs/formats.md."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pyspark_dstl.backend.lineage.commit_entry import CommitEntry
from pyspark_dstl.changelog.changelog_errors import ChangelogError
from pyspark_dstl.core.checksummed_json import RecordKind
from pyspark_dstl.core.errors import excerpt
from pyspark_dstl.materializer.remote import RemoteFiles

PREFIX = "schemas/"
MAGIC = "DSTL-STATE-SCHEMA"
MAX_RECORD_BYTES = 16 * 1024 * 1024


class _DamagedRecord(ValueError):
    """A record inspect cannot read; reported as a problem, never raised to the caller."""


_RECORD = RecordKind("state schema record", (MAGIC,), "record", 1, _DamagedRecord,
                     MAX_RECORD_BYTES)
_DDL_NAMES = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}
_NAME = re.compile(r"^([^/]+)/(0|[1-9][0-9]{0,8})\.json$")


def describe_schema_records(storage: RemoteFiles, latest: CommitEntry | None,
                            problems: list[str]) -> dict[str, Any]:
    """operator -> {"committed": id or None, "chain": [ids, newest first], "records":
    [{id, base, created_ms, variables: {name: text}}]}; damaged records go to `problems`."""
    try:
        infos = storage.loop.run(storage.alist(PREFIX))
    except ChangelogError as exc:
        problems.append(f"state schema records: cannot list {PREFIX!r}: {excerpt(exc)}")
        return {}
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for info in infos:
        match = _NAME.match(info.path[len(PREFIX):])
        if match is None:
            continue
        if info.size > MAX_RECORD_BYTES:
            problems.append(f"state schema record {info.path!r}: {info.size} bytes, more "
                            f"than a record may hold")
            continue
        body = _read(storage, info.path, problems)
        if body is not None:
            found.setdefault(match.group(1), {})[int(match.group(2))] = body
    named = dict((latest.extra.get("state_schemas") or {}) if latest is not None else {})
    report: dict[str, Any] = {}
    for operator, records in sorted(found.items()):
        committed = named.get(operator)
        if committed is None and latest is not None and 0 in records:
            committed = 0  # entries written before schema ids: their values are id 0
        report[operator] = {
            "committed": committed,
            "chain": _chain(records, committed),
            "records": [{"id": i, "base": r.get("base"), "created_ms": r.get("created_ms"),
                         "variables": {name: _variable(v)
                                       for name, v in sorted(r["variables"].items())}}
                        for i, r in sorted(records.items())],
        }
    return report


def schema_record_problems(storage: RemoteFiles, latest: CommitEntry | None) -> list[str]:
    """For `verify`: damaged records, and a record missing from the chain the newest commit
    reads its state schemas through."""
    problems: list[str] = []
    described = describe_schema_records(storage, latest, problems)
    named = dict((latest.extra.get("state_schemas") or {}) if latest is not None else {})
    for operator in sorted(set(described) | set(named)):
        found = described.get(operator)
        committed = named.get(operator, found["committed"] if found else None)
        records = {r["id"]: r for r in found["records"]} if found else {}
        step, seen = committed, set()
        while step is not None and step not in seen:
            seen.add(step)
            if step not in records:
                problems.append(f"state schema record {PREFIX}{operator}/{step}.json is "
                                f"missing: the newest commit reads schema id {committed} "
                                f"through it")
                break
            step = records[step]["base"]
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


def _read(storage: RemoteFiles, path: str, problems: list[str]) -> dict[str, Any] | None:
    try:
        _, body = _RECORD.decode(storage.loop.run(storage.aget(path)), path)
    except ChangelogError as exc:
        problems.append(f"state schema record {path!r}: unreadable: {excerpt(exc)}")
        return None
    except _DamagedRecord as exc:
        problems.append(str(exc))
        return None
    if not isinstance(body.get("variables"), dict):
        problems.append(f"state schema record {path!r} has no variables")
        return None
    return body


def _chain(records: Mapping[int, Mapping[str, Any]], start: int | None) -> list[int]:
    chain: list[int] = []
    step = start
    while step is not None and step in records and step not in chain:
        chain.append(step)
        step = records[step].get("base")
    return chain


def _variable(declared: Mapping[str, Any]) -> str:
    text = f"{declared.get('kind')} state"
    if declared.get("key_schema") is not None:
        text += f", key <{_type(declared['key_schema'])}>"
    text += f", value <{_type(declared.get('value_schema'))}>"
    return text + (", with TTL" if declared.get("ttl") else "")


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
