"""What a PySpark Column says: a function call, its arguments, an alias, a column name.

A chained aggregation needs to know which aggregate function a column calls (`sum`, `window`,
...) and on what, while Spark itself evaluates the arguments (any expression) on each batch.
Both PySpark flavours keep the unresolved expression a Column was built from: classic in the
JVM (`Column.node`: UnresolvedFunction, Alias, Literal, UnresolvedAttribute, ...), Spark
Connect in Python (`Column._expr`). `read_column` turns either into the same small tree, and
each argument that is an expression comes back as a Column again, so it can be selected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

STAR = "*"


@dataclass(frozen=True)
class Literal:
    value: Any


@dataclass(frozen=True)
class Call:
    """A function call: `name` lower-cased, `args` as Columns (or Literal, or STAR)."""

    name: str
    args: tuple[Any, ...]
    distinct: bool


@dataclass(frozen=True)
class Read:
    """One column as written: its alias (if any), the call it makes (None: not a call), the
    column it names (None: not a plain column), and its text for messages."""

    alias: str | None
    call: Call | None
    column_name: str | None
    text: str


def column_text(column: Any) -> str:
    """How Spark prints the column ("count(1)", "sum(v) AS s")."""
    text = str(column)
    if text.startswith("Column<'") and text.endswith("'>"):
        return text[len("Column<'"):-2]
    return text


def read_column(column: Any) -> Read:
    """The tree of a PySpark Column (classic or Spark Connect)."""
    if hasattr(column, "_jc"):
        return _read_classic(column)
    if hasattr(column, "_expr"):
        return _read_connect(column)
    raise TypeError(f"not a PySpark Column: {type(column).__name__}")


# --- classic: the JVM's ColumnNode -----------------------------------------------------------

def _read_classic(column: Any) -> Read:
    node = column._jc.node()
    text = column_text(column)
    alias = None
    if _kind(node) == "Alias":
        names = _seq(column, node.name())
        alias = str(names[0]) if len(names) == 1 else None
        node = node.child()
    kind = _kind(node)
    if kind == "UnresolvedFunction":
        args = tuple(_classic_argument(column, arg) for arg in _seq(column, node.arguments()))
        call = Call(str(node.functionName()).lower(), args, bool(node.isDistinct()))
        return Read(alias, call, None, text)
    if kind == "UnresolvedAttribute":
        name = ".".join(str(part) for part in _seq(column, node.nameParts()))
        return Read(alias, None, name, text)
    return Read(alias, None, None, text)


def _classic_argument(column: Any, node: Any) -> Any:
    kind = _kind(node)
    if kind == "Literal":
        return Literal(_plain(node.value()))
    if kind == "UnresolvedStar":
        return STAR
    from pyspark.sql.classic.column import Column as ClassicColumn

    return ClassicColumn(_jvm().org.apache.spark.sql.Column(node))


def _kind(node: Any) -> str:
    return str(node.getClass().getSimpleName())


def _jvm() -> Any:
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    assert context is not None and context._jvm is not None
    return context._jvm


def _seq(column: Any, seq: Any) -> list[Any]:
    return list(_jvm().scala.jdk.javaapi.CollectionConverters.asJava(seq))


def _plain(value: Any) -> Any:
    """A literal's value as Python (py4j hands over strings, numbers and booleans as they are;
    anything else, such as Spark's UTF8String, as its text)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


# --- Spark Connect: Python expressions --------------------------------------------------------

def _read_connect(column: Any) -> Read:
    from pyspark.sql.connect import expressions as ex

    expr = column._expr
    text = column_text(column)
    alias = None
    if isinstance(expr, ex.ColumnAlias):
        alias = str(expr._alias[0]) if len(expr._alias) == 1 else None
        expr = expr._child
    if isinstance(expr, ex.UnresolvedFunction):
        args = tuple(_connect_argument(arg) for arg in expr._args)
        return Read(alias, Call(expr._name.lower(), args, bool(expr._is_distinct)), None, text)
    if isinstance(expr, ex.ColumnReference):
        return Read(alias, None, str(expr._unparsed_identifier), text)
    return Read(alias, None, None, text)


def _connect_argument(expr: Any) -> Any:
    from pyspark.sql.connect import expressions as ex
    from pyspark.sql.connect.column import Column as ConnectColumn

    if isinstance(expr, ex.LiteralExpression):
        return Literal(_plain(expr._value))
    if isinstance(expr, ex.UnresolvedStar):
        return STAR
    return ConnectColumn(expr)
