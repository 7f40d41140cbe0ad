"""What the switch returns stands in for the DataFrame up to the sink: stateless steps after the
stateful step run on each batch's output; stateful steps and actions are refused at the call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import functions as F

from pyspark_dstl import DropInUsageError
from tests.support.compat_processors import RunningCountPandas
from tests.support.compat_runs import input_stream, write_inputs

pytestmark = pytest.mark.spark

USERS = "user string, page string"
COUNTS = "user string, count long"


def counts_of(spark: Any, directory: Path) -> Any:
    write_inputs(directory, [pd.DataFrame({"user": ["a", "a", "b"], "page": ["x", "y", "z"]}),
                             pd.DataFrame({"user": ["a", "c"], "page": ["x", "y"]})])
    return input_stream(spark, directory, USERS).groupBy("user").transformWithStateInPandas(
        RunningCountPandas(), COUNTS, "Update", "None")


def run_collecting(frame: Any) -> dict[int, list[tuple[Any, ...]]]:
    seen: dict[int, list[tuple[Any, ...]]] = {}

    def keep(batch: Any, batch_id: int) -> None:
        seen[batch_id] = sorted(tuple(row) for row in batch.collect())

    query = frame.writeStream.foreachBatch(keep).start()
    query.processAllAvailable()
    query.stop()
    return seen


def test_stateless_steps_after_the_stateful_step_run_on_each_batch(dropin: Any,
                                                                   tmp_path: Path) -> None:
    counts = counts_of(dropin, tmp_path / "in")
    shaped = (counts.withColumn("twice", counts["count"] * 2).filter("count > 1")
              .select("user", "twice").withColumnRenamed("twice", "doubled"))
    assert shaped.columns == ["user", "doubled"]
    assert run_collecting(shaped) == {0: [("a", 4)], 1: [("a", 6)]}


def test_a_join_with_a_static_dataframe_runs_on_each_batch(dropin: Any, tmp_path: Path) -> None:
    names = dropin.createDataFrame([("a", "Ann"), ("c", "Cy")], "user string, name string")
    joined = counts_of(dropin, tmp_path / "in").join(names, "user")
    assert run_collecting(joined) == {0: [("a", 2, "Ann")], 1: [("a", 3, "Ann"),
                                                                 ("c", 1, "Cy")]}


def test_select_expr_and_with_columns_and_drop_are_replayed(dropin: Any, tmp_path: Path) -> None:
    shaped = (counts_of(dropin, tmp_path / "in").selectExpr("user", "count + 100 AS n")
              .withColumns({"tag": F.lit("t")}).drop("tag").where(F.col("n") > 101))
    assert run_collecting(shaped) == {0: [("a", 102)], 1: [("a", 103), ]}


def test_an_unknown_column_fails_at_the_call(dropin: Any, tmp_path: Path) -> None:
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException):
        counts_of(dropin, tmp_path / "in").select("no_such_column")


@pytest.mark.parametrize("step", ["cube", "rollup", "orderBy", "limit", "intersect"])
def test_a_stateful_step_this_backend_does_not_chain_is_refused_by_name(
        dropin: Any, tmp_path: Path, step: str) -> None:
    counts = counts_of(dropin, tmp_path / "in")
    arguments = {"limit": (1,), "orderBy": ("user",), "cube": ("user",), "rollup": ("user",),
                 "intersect": (counts,)}.get(step, ())
    with pytest.raises(DropInUsageError) as failure:
        getattr(counts, step)(*arguments)
    first_line = str(failure.value).splitlines()[0]
    assert first_line.startswith(f"{step}(...)") and "foreachBatch" in first_line


def test_a_join_with_another_stream_is_refused(dropin: Any, tmp_path: Path) -> None:
    counts = counts_of(dropin, tmp_path / "in")
    other = input_stream(dropin, tmp_path / "in", USERS)
    with pytest.raises(DropInUsageError, match=r"^join\(<a streaming DataFrame>\)"):
        counts.join(other, "user")


def test_an_action_on_the_streaming_result_names_writestream(dropin: Any,
                                                             tmp_path: Path) -> None:
    with pytest.raises(DropInUsageError, match=r"^collect: .*writeStream"):
        counts_of(dropin, tmp_path / "in").collect()
