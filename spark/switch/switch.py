"""`install()` and `uninstall()`: PySpark's own `groupBy(...).transformWithStateInPandas(...)` and
`.transformWithState(...)` on a streaming DataFrame run on this backend.

The switch replaces the two methods on PySpark's GroupedData classes (classic and Spark
Connect). On a batch DataFrame the replacement calls PySpark's own method, so batch queries
keep Spark's operator; on a streaming DataFrame it returns a `StatefulDataFrame`, which stands in
for the DataFrame up to the sink. It also routes reads of Spark's state data sources
(`statestore`, `state-metadata`) on this backend's checkpoint locations to this backend's
readers (`_route_state_reads`, readers/routing.py). Installing twice changes nothing;
`uninstall` puts PySpark's methods back. A method the installed PySpark lacks (the Row API
before 4.1, both methods in 4.0's Spark Connect client) is refused by name while the switch is
on, with the version and what to use instead (an AttributeError still, so `hasattr` answers as
PySpark would).
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from typing import Any

from pyspark_dstl.core.by_name import load_by_name
from pyspark_dstl.spark.pyspark_versions import missing_transform_method
from pyspark_dstl.spark.readers.discovery import warn_if_undiscoverable
from pyspark_dstl.spark.spark_errors import DropInUsageError
from pyspark_dstl.spark.switch.frame import StatefulDataFrame

ENTRY_POINTS = ("transformWithStateInPandas", "transformWithState")
ROWS_AS = {"transformWithStateInPandas": "pandas", "transformWithState": "rows"}
GROUPED_DATA_CLASSES = ("pyspark.sql.group:GroupedData",
                        "pyspark.sql.connect.group:GroupedData")
READER_CLASSES = ("pyspark.sql.readwriter:DataFrameReader",
                  "pyspark.sql.connect.readwriter:DataFrameReader")
_ABSENT = object()
GETATTR = "__getattr__"

_lock = threading.Lock()
# (class, method name) -> what the class itself held before install (or _ABSENT when the
# method was inherited), so that uninstall restores exactly that
_replaced: dict[tuple[type, str], Any] = {}


def install() -> None:
    """Route PySpark's transformWithState calls on streaming DataFrames to this backend."""
    warn_if_undiscoverable()
    with _lock:
        for cls in _classes(GROUPED_DATA_CLASSES, "PySpark's GroupedData"):
            for name in ENTRY_POINTS:
                if (cls, name) in _replaced or not hasattr(cls, name):
                    continue
                _replaced[(cls, name)] = cls.__dict__.get(name, _ABSENT)
                setattr(cls, name, _entry(name, getattr(cls, name)))
            missing = frozenset(name for name in ENTRY_POINTS if not hasattr(cls, name))
            if missing and (cls, GETATTR) not in _replaced and not hasattr(cls, GETATTR):
                _replaced[(cls, GETATTR)] = _ABSENT
                setattr(cls, GETATTR, _refusing_getattr(cls.__module__, missing))
        _route_state_reads()


def uninstall() -> None:
    """Give PySpark its own methods back (queries already started keep running here)."""
    with _lock:
        for (cls, name), own in _replaced.items():
            if own is _ABSENT:
                delattr(cls, name)
            else:
                setattr(cls, name, own)
        _replaced.clear()


def installed() -> bool:
    """Whether `install()` is in effect."""
    return bool(_replaced)


def _classes(paths: tuple[str, ...], what: str) -> Iterator[type]:
    for path in paths:
        cls = load_by_name(path, what, DropInUsageError, if_importable=True)
        if cls is not None:  # Spark Connect's client needs grpc; without it, classic only
            yield cls


def _refusing_getattr(module: str, missing: frozenset[str]) -> Callable[[Any, str], Any]:
    """A __getattr__ that names the version for the methods this PySpark lacks."""

    def __getattr__(grouped: Any, name: str) -> Any:
        if name in missing:
            raise missing_transform_method(module, name)
        raise AttributeError(f"{type(grouped).__name__!r} object has no attribute {name!r}")

    return __getattr__


Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]


def _replace(cls: type, name: str, make: Wrap) -> None:
    """Put `make(PySpark's method)` in its place, remembering what to give back."""
    if (cls, name) in _replaced or not hasattr(cls, name):
        return
    _replaced[(cls, name)] = cls.__dict__.get(name, _ABSENT)
    setattr(cls, name, make(getattr(cls, name)))


def _route_state_reads() -> None:
    """Reads of Spark's state data sources on this backend's checkpoint locations go to this
    backend's readers: DataFrameReader.load decides (readers/routing.py). The classic reader
    keeps its format and options in the JVM, so they are noted on the Python side too."""
    for cls in _classes(READER_CLASSES, "PySpark's DataFrameReader"):
        classic = not cls.__module__.startswith("pyspark.sql.connect")
        if classic:
            _replace(cls, "format", _noting_format)
            _replace(cls, "option", _noting_option)
            _replace(cls, "options", _noting_options)
        _replace(cls, "load", functools.partial(_routing_load, classic=classic))


def _noted(reader: Any) -> dict[str, Any]:
    return reader.__dict__.setdefault("_dstl_noted", {"format": None, "options": {}})


def _noting_format(pyspark_method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(pyspark_method)
    def format(reader: Any, source: str) -> Any:
        _noted(reader)["format"] = source
        return pyspark_method(reader, source)

    return format


def _noting_option(pyspark_method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(pyspark_method)
    def option(reader: Any, key: str, value: Any) -> Any:
        _noted(reader)["options"][key] = value
        return pyspark_method(reader, key, value)

    return option


def _noting_options(pyspark_method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(pyspark_method)
    def options(reader: Any, **given: Any) -> Any:
        _noted(reader)["options"].update(given)
        return pyspark_method(reader, **given)

    return options


def _routing_load(pyspark_method: Callable[..., Any], *, classic: bool) -> Callable[..., Any]:
    from pyspark_dstl.spark.readers.routing import routed_read

    @functools.wraps(pyspark_method)
    def load(reader: Any, path: Any = None, format: Any = None,
             schema: Any = None, **options: Any) -> Any:
        if classic:
            noted = _noted(reader)
            source, given, spark = format or noted["format"], noted["options"], reader._spark
        else:
            source, given, spark = format or reader._format, reader._options, reader._client
        route = routed_read(spark, source, path, {**given, **options})
        if route is None:
            return pyspark_method(reader, path, format, schema, **options)
        target, extra = route
        return pyspark_method(reader, path, target, schema, **options, **extra)

    load.__dstl_entry__ = True  # type: ignore[attr-defined]
    return load


def _entry(name: str, pyspark_method: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(pyspark_method)

    @functools.wraps(pyspark_method)
    def entry(grouped: Any, *args: Any, **kwargs: Any) -> Any:
        if not grouped._df.isStreaming:
            return pyspark_method(grouped, *args, **kwargs)
        try:
            bound = signature.bind(grouped, *args, **kwargs)
        except TypeError as exc:
            raise DropInUsageError(f"{name}(...): {exc}; the arguments are PySpark's "
                                   f"({', '.join(list(signature.parameters)[1:])})") from None
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        arguments.pop(next(iter(signature.parameters)))
        return StatefulDataFrame.of(grouped._df, grouping_columns(grouped), ROWS_AS[name],
                                    arguments)

    entry.__dstl_entry__ = True  # type: ignore[attr-defined]
    return entry


def grouping_columns(grouped: Any) -> tuple[str, ...]:
    """The names of the columns a GroupedData groups by; expressions are refused by name."""
    df = grouped._df
    if hasattr(grouped, "_grouping_cols"):  # Spark Connect
        names = tuple(df.select(*grouped._grouping_cols).columns)
        described = [str(column) for column in grouped._grouping_cols]
    else:  # classic: the JVM's RelationalGroupedDataset knows its grouping expressions
        expressions = _jvm_list(df, grouped._jgd.groupingExprs())
        names = tuple(_expression_name(e) for e in expressions)
        described = [str(e.toString()) for e in expressions]
    existing = set(df.columns)
    for name, text in zip(names, described, strict=True):
        if name not in existing:
            raise DropInUsageError(
                f"groupBy({text}): this backend groups by columns of the input; add the "
                f"expression as a column first (df.withColumn({name!r}, ...)) and group by "
                f"its name")
    return names


def _jvm_list(df: Any, seq: Any) -> list[Any]:
    converters = df.sparkSession._jvm.scala.jdk.javaapi.CollectionConverters
    return list(converters.asJava(seq))


def _expression_name(expression: Any) -> str:
    kind = expression.getClass().getSimpleName()
    if kind in ("UnresolvedAttribute", "AttributeReference", "Alias"):
        return str(expression.name())
    return str(expression.toString())
