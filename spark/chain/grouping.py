"""`GroupedSteps`: PySpark's GroupedData surface for a `groupBy(...)` after a stateful step.

The switch's stand-in and the builder's stream both return one from `groupBy` / `group_by`;
each of its calls plans a chained step (`ChainedSteps`) and hands the new chain to `wrap`,
which turns it into the caller's kind of result (a stand-in DataFrame, a stream).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from pyspark_dstl.spark.chain.expressions import column_text, read_column
from pyspark_dstl.spark.chain.steps import ChainedSteps
from pyspark_dstl.spark.spark_errors import ChainedStepError

Result = TypeVar("Result")
ENTRY_NAMES = {"pandas": "transformWithStateInPandas", "rows": "transformWithState"}
SHORTHANDS = ("sum", "avg", "mean", "min", "max")


class GroupedSteps(Generic[Result]):
    def __init__(self, chain: ChainedSteps, cols: tuple[Any, ...],
                 wrap: Callable[[ChainedSteps, str], Result]) -> None:
        self._chain = chain
        self._wrap = wrap
        self._cols = tuple(c for col in cols
                           for c in (col if isinstance(col, list | tuple) else (col,)))

    def _label(self, call: str) -> str:
        shown = ", ".join(c if isinstance(c, str) else column_text(c) for c in self._cols)
        return f"groupBy({shown}).{call}"

    def agg(self, *exprs: Any) -> Result:
        """Aggregate columns (F.count('*'), F.sum('v').alias('s'), ...) or one dict
        {column: function name}, as PySpark's GroupedData.agg."""
        from pyspark.sql import functions as F

        if len(exprs) == 1 and isinstance(exprs[0], dict):
            exprs = tuple(_function(F, function)(column).alias(f"{function}({column})")
                          for column, function in exprs[0].items())
        shown = ", ".join(column_text(e) for e in exprs)
        chain = self._chain.aggregate(self._cols, exprs, self._label(f"agg({shown})"))
        return self._wrap(chain, "groupBy().agg")

    def count(self) -> Result:
        from pyspark.sql import functions as F

        chain = self._chain.aggregate(self._cols, [F.count(F.lit(1)).alias("count")],
                                      self._label("count()"))
        return self._wrap(chain, "groupBy().count")

    def sum(self, *cols: str) -> Result:
        return self._shorthand("sum", cols)

    def avg(self, *cols: str) -> Result:
        return self._shorthand("avg", cols)

    def mean(self, *cols: str) -> Result:
        return self._shorthand("avg", cols)

    def min(self, *cols: str) -> Result:
        return self._shorthand("min", cols)

    def max(self, *cols: str) -> Result:
        return self._shorthand("max", cols)

    def _shorthand(self, function: str, cols: tuple[str, ...]) -> Result:
        """PySpark's groupBy(...).sum(...) and friends: without columns, every numeric
        column that is not a grouping column."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import NumericType

        names = list(cols) or [f.name for f in self._chain.template.schema.fields
                               if isinstance(f.dataType, NumericType)
                               and f.name not in self._cols]
        exprs = [getattr(F, function)(name).alias(f"{function}({name})") for name in names]
        label = self._label(f"{function}({', '.join(map(repr, cols))})")
        return self._wrap(self._chain.aggregate(self._cols, exprs, label),
                          f"groupBy().{function}")

    def transformWithStateInPandas(self, statefulProcessor: Any, outputStructType: Any,
                                   outputMode: str, timeMode: str, initialState: Any = None,
                                   eventTimeColumnName: str = "") -> Result:
        return self._transform("pandas", statefulProcessor, outputStructType, outputMode,
                               timeMode, initialState, eventTimeColumnName)

    def transformWithState(self, statefulProcessor: Any, outputStructType: Any,
                           outputMode: str, timeMode: str, initialState: Any = None,
                           eventTimeColumnName: str = "") -> Result:
        return self._transform("rows", statefulProcessor, outputStructType, outputMode,
                               timeMode, initialState, eventTimeColumnName)

    def _transform(self, rows_as: str, processor: Any, schema: Any, output_mode: str,
                   time_mode: str, initial_state: Any, event_time: str) -> Result:
        entry = ENTRY_NAMES[rows_as]
        keys = tuple(_column_name(c, entry) for c in self._cols)
        arguments = {"statefulProcessor": processor, "outputStructType": schema,
                     "outputMode": output_mode, "timeMode": time_mode,
                     "initialState": initial_state, "eventTimeColumnName": event_time}
        label = f"groupBy({', '.join(keys)}).{entry}(...)"
        return self._wrap(self._chain.transform(keys, rows_as, arguments, label),
                          f"groupBy().{entry}")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise ChainedStepError(
            f"groupBy(...).{name}(...) after {self._chain.entry}: not supported after a "
            f"stateful step on this backend (supported: agg, count, sum, avg, mean, min, max, "
            f"transformWithStateInPandas, transformWithState); run it on each batch in "
            f".writeStream.foreachBatch(...)")


def _function(functions: Any, name: str) -> Any:
    function = getattr(functions, name, None)
    if function is None or name.startswith("_"):
        raise ChainedStepError(f"agg({{...: {name!r}}}): unknown aggregate function {name!r}")
    return function


def _column_name(column: Any, entry: str) -> str:
    if isinstance(column, str):
        return column
    read = read_column(column)
    if read.column_name is None or read.alias is not None:
        raise ChainedStepError(
            f"groupBy({column_text(column)}).{entry}(...): this backend groups by columns of "
            f"the input; add the expression as a column first (.withColumn(name, ...)) and "
            f"group by its name")
    return read.column_name
