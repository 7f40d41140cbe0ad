"""`StatefulDataFrame`: what the switch returns in place of transformWithState's DataFrame.

The stateful step runs inside foreachBatch (that is what lets the driver pick the committed
attempt of every partition), so its output exists only batch by batch. Stateless steps called
after it are recorded and replayed on each batch's output; each is also tried at the call on an
empty DataFrame of the output's schema, so a wrong column name fails where it is written, as
it would in Spark. The stateful steps Spark 4 allows after transformWithState (an aggregation,
a deduplication, another transformWithState) become further operators of the same query
(`spark/chain/`); other stateful steps and actions are refused at the call, naming the step
and what to do instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark_dstl.spark.chain.grouping import GroupedSteps
from pyspark_dstl.spark.chain.steps import ChainedSteps
from pyspark_dstl.spark.spark_errors import DropInUsageError

STATELESS_STEPS = frozenset({
    "alias", "coalesce", "crossJoin", "drop", "dropna", "fillna", "filter", "hint", "join",
    "mapInArrow", "mapInPandas", "repartition", "repartitionByRange", "replace", "sample",
    "select", "selectExpr", "sortWithinPartitions", "toDF", "where", "withColumn",
    "withColumnRenamed", "withColumns", "withColumnsRenamed", "withMetadata", "withWatermark",
    "unpivot", "melt", "to",
})
CHAINED_STEPS = frozenset({"groupBy", "groupby", "agg", "distinct", "dropDuplicates",
                           "drop_duplicates", "dropDuplicatesWithinWatermark",
                           "drop_duplicates_within_watermark"})
STATEFUL_STEPS = {
    "cube": "a cube aggregation", "rollup": "a rollup aggregation",
    "groupingSets": "a grouping-sets aggregation",
    "limit": "a streaming limit", "orderBy": "a sort", "sort": "a sort",
    "union": "a union with another DataFrame", "unionAll": "a union with another DataFrame",
    "unionByName": "a union with another DataFrame",
    "intersect": "a set operation", "intersectAll": "a set operation",
    "subtract": "a set operation", "exceptAll": "a set operation",
}
ACTIONS = frozenset({
    "collect", "count", "show", "toPandas", "toArrow", "first", "head", "take", "tail",
    "foreach", "foreachPartition", "toLocalIterator", "cache", "persist", "checkpoint",
    "localCheckpoint", "describe", "summary", "isEmpty", "write", "writeTo", "mergeInto",
    "createOrReplaceTempView", "createTempView", "createGlobalTempView",
    "createOrReplaceGlobalTempView", "observe", "rdd",
})
ENTRY_NAMES = {"pandas": "transformWithStateInPandas", "rows": "transformWithState"}


@dataclass(frozen=True)
class Step:
    """One recorded DataFrame call, replayed on each batch's output."""

    method: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]

    def apply(self, df: Any) -> Any:
        return getattr(df, self.method)(*self.args, **dict(self.kwargs))


@dataclass(frozen=True)
class StatefulCall:
    """The transformWithState call itself: the input, its key columns and PySpark's arguments."""

    source: Any  # the streaming DataFrame that was grouped
    key_columns: tuple[str, ...]
    rows_as: str  # "pandas" or "rows"
    arguments: Mapping[str, Any]  # PySpark's keyword arguments, defaults applied

    @property
    def entry(self) -> str:
        return ENTRY_NAMES[self.rows_as]


class StatefulDataFrame:
    """Stands in for the streaming DataFrame a transformWithState call returns: stateless steps,
    the stateful steps chained after it, the schema, and `.writeStream`."""

    def __init__(self, call: StatefulCall, plan: Any, chain: ChainedSteps,
                 steps: tuple[Step, ...] = ()) -> None:
        self._call = call
        self._plan = plan  # compat.CompatPlan: the checked processor and output schema
        self._chain = chain  # the steps after the first one, and this frame's template
        self._steps = steps  # every step written after the first one, for explain()

    @classmethod
    def of(cls, source: Any, key_columns: tuple[str, ...], rows_as: str,
           arguments: Mapping[str, Any]) -> StatefulDataFrame:
        """Check PySpark's arguments now (as PySpark does at the call) and stand in."""
        from pyspark_dstl.spark.pyspark_api.transform import plan_transform

        plan = plan_transform(source, key_columns, arguments["statefulProcessor"],
                              arguments["outputStructType"], arguments["outputMode"],
                              arguments["timeMode"], arguments["initialState"],
                              arguments["eventTimeColumnName"], rows_as)
        call = StatefulCall(source, key_columns, rows_as, dict(arguments))
        chain = ChainedSteps.after(source, plan.output_schema,
                                   arguments["eventTimeColumnName"] or None, plan.time_mode,
                                   call.entry)
        return cls(call, plan, chain)

    # --- what the writer needs ---------------------------------------------------------------

    @property
    def stateful_call(self) -> StatefulCall:
        return self._call

    @property
    def compat_plan(self) -> Any:
        return self._plan

    @property
    def chained_steps(self) -> ChainedSteps:
        """The stateful steps after the first one (`.links`) and the stateless steps since the
        last stateful step."""
        return self._chain

    def apply_steps(self, output: Any) -> Any:
        """One batch's output of the last stateful step with the stateless steps since it."""
        return self._chain.finish(output)

    # --- the DataFrame surface ---------------------------------------------------------------

    @property
    def _template(self) -> Any:
        return self._chain.template

    @property
    def writeStream(self) -> Any:
        from pyspark_dstl.spark.switch.writer import StatefulStreamWriter

        return StatefulStreamWriter(self)

    @property
    def isStreaming(self) -> bool:
        return True

    @property
    def sparkSession(self) -> Any:
        return self._call.source.sparkSession

    @property
    def schema(self) -> Any:
        return self._template.schema

    @property
    def columns(self) -> list[str]:
        return list(self._template.columns)

    @property
    def dtypes(self) -> list[tuple[str, str]]:
        return list(self._template.dtypes)

    def printSchema(self, level: int | None = None) -> None:
        self._template.printSchema(level)

    def explain(self, extended: bool | str | None = None, mode: str | None = None) -> None:
        print(f"== pyspark-dstl ==\n{self._call.entry} grouped by "
              f"{', '.join(self._call.key_columns)} (runs on pyspark-dstl inside foreachBatch)"
              + "".join(f"\n then {step.method}" for step in self._steps)
              + "\n== input ==")
        self._call.source.explain(extended, mode)

    def transform(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return func(self, *args, **kwargs)

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, str):
            self._template[item]  # fails as Spark does for an unknown column
            return _column(self.sparkSession, item)
        if isinstance(item, list | tuple):
            return self.select(*item)
        return self.filter(item)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in STATELESS_STEPS:
            return self._recorder(name)
        if name in CHAINED_STEPS:
            return getattr(self, "_" + name.lower().replace("_", ""))
        if name in STATEFUL_STEPS:
            return _refusal(self._call.entry, name, STATEFUL_STEPS[name])
        if name in ACTIONS:
            raise DropInUsageError(
                f"{name}: the result of {self._call.entry} is a streaming DataFrame; start it "
                f"with .writeStream (use .writeStream.foreachBatch(...) to act on each batch, "
                f"or format('memory') to query the results)")
        if name in self._template.columns:
            return _column(self.sparkSession, name)
        raise AttributeError(f"{name!r}: not a column of {self._call.entry}'s output "
                             f"({', '.join(self._template.columns)}) nor a DataFrame method "
                             f"this backend supports after it")

    def __repr__(self) -> str:
        columns = ", ".join(f"{name}: {kind}" for name, kind in self.dtypes)
        return f"StatefulDataFrame[{columns}]"

    def _with(self, chain: ChainedSteps, method: str) -> StatefulDataFrame:
        return StatefulDataFrame(self._call, self._plan, chain,
                                 (*self._steps, Step(method, (), {})))

    def _recorder(self, method: str) -> Callable[..., StatefulDataFrame]:
        def record(*args: Any, **kwargs: Any) -> StatefulDataFrame:
            for value in (*args, *kwargs.values()):
                if _is_stream(value):
                    raise DropInUsageError(
                        f"{method}(<a streaming DataFrame>) after {self._call.entry}: a "
                        f"stream-stream {method} is stateful and cannot follow it here; join "
                        f"the streams before the stateful step, or write this output to a "
                        f"table and read it as a stream in a second query")
            step = Step(method, tuple(args), dict(kwargs))
            redefines = (f"withWatermark({', '.join(map(repr, args))})"
                         if method == "withWatermark" else None)
            chain = self._chain.then(step.apply, redefines_watermark=redefines)
            return StatefulDataFrame(self._call, self._plan, chain, (*self._steps, step))

        return record

    # --- stateful steps after the first one (spark/chain) --------------------------------

    def _groupby(self, *cols: Any) -> GroupedSteps[StatefulDataFrame]:
        return GroupedSteps(self._chain, cols, self._with)

    def _agg(self, *exprs: Any) -> StatefulDataFrame:
        return GroupedSteps(self._chain, (), self._with).agg(*exprs)

    def _distinct(self) -> StatefulDataFrame:
        return self._with(self._chain.deduplicate(None, False, "distinct()"), "distinct")

    def _dropduplicates(self, subset: Any = None, *more: str) -> StatefulDataFrame:
        columns = _subset(subset, more)
        label = f"dropDuplicates({columns!r})" if columns else "dropDuplicates()"
        return self._with(self._chain.deduplicate(columns, False, label), "dropDuplicates")

    def _dropduplicateswithinwatermark(self, subset: Any = None,
                                       *more: str) -> StatefulDataFrame:
        columns = _subset(subset, more)
        label = (f"dropDuplicatesWithinWatermark({columns!r})" if columns
                 else "dropDuplicatesWithinWatermark()")
        return self._with(self._chain.deduplicate(columns, True, label),
                          "dropDuplicatesWithinWatermark")


def _subset(subset: Any, more: tuple[str, ...]) -> list[str] | None:
    if subset is None:
        return list(more) or None
    if isinstance(subset, str):
        return [subset, *more]
    return [*subset, *more]


def _refusal(entry: str, method: str, kind: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise DropInUsageError(
            f"{method}(...) after {entry}: {kind} is a stateful step this backend does not "
            f"run after a stateful step (it runs aggregations, deduplications and "
            f"transformWithState there); run it on each batch in "
            f".writeStream.foreachBatch(...), or write this output to a table and read that "
            f"as a stream in a second query")

    return refuse


def _is_stream(value: Any) -> bool:
    if isinstance(value, StatefulDataFrame):
        return True
    from pyspark.sql import DataFrame

    return isinstance(value, DataFrame) and bool(value.isStreaming)


def _column(spark: Any, name: str) -> Any:
    """An unbound column reference, so it resolves against each batch's output."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        from pyspark.sql.connect.functions import col as connect_col

        return connect_col(name)
    from pyspark.sql.classic.column import Column

    sc = spark.sparkContext
    return Column(sc._jvm.org.apache.spark.sql.functions.col(name))
