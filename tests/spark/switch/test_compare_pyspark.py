"""PySpark's own transformWithState queries, unchanged but for `pyspark_dstl.install()`, give
the same rows in the same batches as PySpark's own operator, in one session.

The queries are PySparkEngine's (tests/support/tws_compare.py): `df.groupBy(...)
.transformWithStateInPandas(...)` or `.transformWithState(...)`, then `.writeStream
.foreachBatch(...).option("checkpointLocation", ...).trigger(...).start()`. The reference runs
are shared with tests/spark/pyspark_api/test_compare_pyspark.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.tws_compare import (
    ReferenceRuns,
    Workspace,
    assert_same_batches,
    run_phases,
    run_steps,
)
from tests.support.tws_scenarios import (
    EVENT_TIMERS,
    INITIAL_STATE,
    MAP_STATE,
    PROCESSING_TIMERS,
    TOP_K,
    Scenario,
)
from tests.support.versions import needs_row_api

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]



@pytest.mark.parametrize("scenario", [
    MAP_STATE, INITIAL_STATE, pytest.param(TOP_K, marks=needs_row_api),
    pytest.param(EVENT_TIMERS, marks=pytest.mark.version)], ids=lambda s: s.name)
def test_the_switched_query_gives_the_same_batches_as_pyspark(
        spark: Any, reference: ReferenceRuns, scenario: Scenario, tmp_path: Path) -> None:
    expected = reference.get(scenario)
    actual = run_phases(spark, scenario, "dropin", Workspace(tmp_path))
    assert_same_batches(expected, actual)


@pytest.mark.version
def test_switched_processing_time_timers_fire_as_pysparks_across_restarts(
        spark: Any, tmp_path: Path) -> None:
    runs = run_steps(spark, PROCESSING_TIMERS, Workspace(tmp_path),
                     engines=("pyspark", "dropin"))
    assert_same_batches(runs["pyspark"], runs["dropin"])
