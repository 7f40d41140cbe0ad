"""The operators of a query, as a commit entry records them: the first stateful step and each
step chained after it, in the order data flows, with the operator id Spark would give each.

One function (`query_operators`) for every tool that needs the list: the state reader, the
command line's inspect, import-state and export-state. Spark numbers a query's stateful
operators from the sink back (the operator nearest the sink is 0), so the first of n steps is
operator n - 1 in a Spark checkpoint; here each keeps its name (`stateful`, `stateful.1`, ...)
as its directory under `state/`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_dstl.backend.lineage.commit_entry import CommitEntry

CHAIN = "chain"  # commit entry extra: one record per chained operator, in order
FIRST_STEP = "transform"


@dataclass(frozen=True)
class QueryOperator:
    """One stateful operator of a query at a batch."""

    name: str
    position: int  # 0: the first stateful step; 1, 2, ...: the steps chained after it
    spark_operator_id: int  # Spark's number for it: the step nearest the sink is 0
    kind: str  # "transform" for the first step; a chained step's kind (chain/links.py)
    num_partitions: int
    key_columns: tuple[str, ...]
    key_types: tuple[str, ...]
    label: str = ""  # the step as written (chained steps)
    record: Mapping[str, Any] = field(default_factory=dict)  # the entry's record of it


def query_operators(entry: CommitEntry) -> list[QueryOperator]:
    """Every operator `entry` commits, first stateful step first. An operator that no chain
    record names is a first step (an entry written before chains has only that one)."""
    records = [r for r in entry.extra.get(CHAIN) or [] if isinstance(r, Mapping)]
    chained = {str(record.get("name")): record for record in records}
    firsts = [name for name in entry.operators if name not in chained]
    ordered = [*firsts, *(str(record.get("name")) for record in records
                          if record.get("name") in entry.operators)]
    total = len(ordered)
    operators = []
    for position, name in enumerate(ordered):
        commit = entry.operators[name]
        record = chained.get(name)
        if record is None:
            operators.append(QueryOperator(
                name, position, total - 1 - position, FIRST_STEP, commit.num_partitions,
                tuple(entry.extra.get("key_columns") or ()),
                tuple(entry.extra.get("key_types") or ())))
        else:
            operators.append(QueryOperator(
                name, position, total - 1 - position, str(record.get("kind", "")),
                commit.num_partitions, tuple(record.get("key_columns") or ()),
                tuple(record.get("key_types") or ()), str(record.get("label", "")), record))
    return operators


def describe_operators(entry: CommitEntry) -> list[dict[str, Any]]:
    """The operators as JSON-ready dicts (what `inspect --json` shows)."""
    return [{"name": op.name, "position": op.position,
             "spark_operator_id": op.spark_operator_id, "kind": op.kind,
             "partitions": op.num_partitions, "key_columns": list(op.key_columns),
             "label": op.label} for op in query_operators(entry)]
