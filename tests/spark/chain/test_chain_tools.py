"""The tools see every operator of a chain: the state reader reads a chained step's state,
`inspect` lists the operators with Spark's operator ids, `verify` checks every store, and a
rescale (online, by a restart with another partition count, or offline with the command
line) moves every operator's state and the query goes on as if nothing happened."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from pyspark_dstl.cli import main as cli
from pyspark_dstl.spark import read_state
from tests.reliability.soak import verify_root
from tests.support.chain_compare import ChainScenario, run_chain
from tests.support.chain_processors import RelayWithCloser

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

WINDOW_COUNTS = ChainScenario("window_counts", RelayWithCloser, lambda first: first.groupBy(
    F.window("at", "10 seconds")).count(), restart_after=None)


def ran(spark: Any, tmp_path: Path, scenario: ChainScenario = WINDOW_COUNTS) -> Path:
    run_chain(spark, scenario, "dropin", tmp_path)
    return tmp_path / "checkpoint-dropin"


def command(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return cli(list(argv), out=out), out.getvalue()


def test_the_state_reader_reads_the_open_windows_of_a_chained_aggregation(
        spark: Any, tmp_path: Path) -> None:
    checkpoint = ran(spark, tmp_path)
    rows = read_state(spark, str(checkpoint), operator="stateful.1").collect()
    windows = [(json.loads(r["key"]), json.loads(r["value"])) for r in rows
               if r["state_variable"] == "aggregate"]
    # the watermark ends at 60 s: only [70 s, 80 s) of i@70 is still open, with one row
    assert windows == [(["1970-01-01T00:01:10+00:00", "1970-01-01T00:01:20+00:00"], [1])]
    timers = [json.loads(r["value"]) for r in rows if r["kind"] == "timer"]
    assert timers == [80_000]  # the window is emitted once the watermark reaches its end


def test_inspect_lists_every_operator_with_sparks_operator_id_and_verify_is_clean(
        spark: Any, tmp_path: Path) -> None:
    checkpoint = ran(spark, tmp_path)
    code, out = command("inspect", checkpoint.as_uri(), "--json")
    assert code == 0
    operators = [(op["name"], op["kind"], op["position"], op["spark_operator_id"],
                  op["partitions"]) for op in json.loads(out)["operators"]]
    assert operators == [("stateful", "transform", 0, 1, 2), ("stateful.1", "aggregate", 1, 0, 2)]
    code, text = command("inspect", checkpoint.as_uri())
    assert "operator stateful.1 (aggregate: groupBy(window(at" in text
    assert verify_root(checkpoint.as_uri()) == []


def test_a_restart_with_another_partition_count_rescales_every_operator_of_the_chain(
        spark: Any, tmp_path: Path) -> None:
    scenario = ChainScenario("window_counts_rescaled", RelayWithCloser,
                             lambda first: first.groupBy(F.window("at", "10 seconds")).count())
    steady = run_chain(spark, scenario, "dropin", tmp_path / "steady")
    rescaled = run_chain(spark, scenario, "dropin", tmp_path / "rescaled",
                         after_restart={"spark.sql.shuffle.partitions": "3"})
    assert rescaled == steady and any(steady.values())
    _, out = command("inspect", (tmp_path / "rescaled" / "checkpoint-dropin").as_uri(),
                        "--json")
    assert [op["partitions"] for op in json.loads(out)["operators"]] == [3, 3]


def test_an_offline_rescale_moves_every_operator_and_keeps_their_state(
        spark: Any, tmp_path: Path) -> None:
    checkpoint = ran(spark, tmp_path)

    def state() -> dict[str, set[tuple[str, str, str]]]:
        return {operator: {(r["state_variable"], r["key"], r["value"])
                           for r in read_state(spark, str(checkpoint),
                                               operator=operator).collect()}
                for operator in ("stateful", "stateful.1")}

    before = state()
    code, out = command("rescale", checkpoint.as_uri(), "--partitions", "3")
    assert code == 0, out
    assert state() == before
    code, out = command("inspect", checkpoint.as_uri(), "--json")
    assert [op["partitions"] for op in json.loads(out)["operators"]] == [3, 3]
    assert verify_root(checkpoint.as_uri()) == []
