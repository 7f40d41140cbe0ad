"""The moves refuse a query that chains stateful steps after its transformWithState, naming
the chained operators, before they write anything, where they would lose the state of the
chained operators (open windows, seen keys): import-state, the in-place move and export-state
without the chained query itself (with it they bring every operator's state: tests/spark/
moves/test_chain_import.py and test_chain_export.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from pyspark_dstl import ExportStateError, NoTransformWithStateError, export_state, import_state
from pyspark_dstl.backend.fencing.epochs import EPOCHS_PREFIX
from tests.support.chain_compare import ChainScenario, run_chain
from tests.support.chain_processors import RelayWithCloser

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

WINDOW_COUNTS = ChainScenario("window_counts", RelayWithCloser, lambda first: first.groupBy(
    F.window("at", "10 seconds")).count(), restart_after=None)


def files_under(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


def without_leases(files: dict[str, bytes]) -> dict[str, bytes]:
    return {path: data for path, data in files.items()
            if not path.startswith(EPOCHS_PREFIX + "/")}


def test_import_state_and_the_in_place_move_without_the_chained_query_refuse_a_chain(
        spark: Any, tmp_path: Path) -> None:
    run_chain(spark, WINDOW_COUNTS, "pyspark", tmp_path)
    source = tmp_path / "checkpoint-pyspark"
    before = files_under(source)
    with pytest.raises(NoTransformWithStateError) as into_new:
        import_state(spark, str(source), str(tmp_path / "dstl"), RelayWithCloser())
    first = str(into_new.value).splitlines()[0]
    assert f"Spark checkpoint {str(source)!r} chains stateful operators" in first
    assert "operator 0: stateStoreSave" in first
    assert "import_state(..., query=<the chained DataFrame>, output_mode=...)" in first
    assert "spark.dstl.query.sparkCheckpoint=migrate" in first
    assert not (tmp_path / "dstl").exists()

    with pytest.raises(NoTransformWithStateError) as in_place:
        import_state(spark, str(source), str(source), RelayWithCloser())
    assert "chains stateful operators" in str(in_place.value).splitlines()[0]
    assert files_under(source) == before  # no marker, no move record, no state written


def test_export_state_without_the_chained_query_refuses_a_chain_whichever_is_named(
        spark: Any, tmp_path: Path) -> None:
    run_chain(spark, WINDOW_COUNTS, "dropin", tmp_path)
    location = tmp_path / "checkpoint-dropin"
    before = files_under(location)
    with pytest.raises(ExportStateError) as refused:
        export_state(spark, str(location), str(tmp_path / "back"), RelayWithCloser())
    first = str(refused.value).splitlines()[0]
    assert "query chains stateful steps after its transformWithState (groupBy(window(at" in first
    assert "as Spark's operator 0): export it from Python with the chained query" in first
    assert "query=<the chained DataFrame as written with pyspark_dstl.install() on>" in first
    with pytest.raises(ExportStateError) as chained_name:
        export_state(spark, str(location), str(tmp_path / "back"), RelayWithCloser(),
                     name="stateful.1")
    assert ("operator 'stateful.1' is step 1 of batch" in str(chained_name.value)
            and "give the first step's name ('stateful')" in str(chained_name.value))
    assert not (tmp_path / "back").exists()
    # the export's lease came and went under epochs/; nothing else changed
    assert without_leases(files_under(location)) == without_leases(before)
