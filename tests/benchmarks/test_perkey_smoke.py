"""The per-key task benchmark runs end to end in its --quick form (as docs/benchmarks.md shows
it, in a subprocess, JSON to a temporary directory), so its split of the per-key path cannot
rot unnoticed when the runner's steps are renamed or moved."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.perkey_task import OTHER, OWN_FRAME, PHASES
from benchmarks.pyspark_path import CATEGORIES, REST
from tests.support.benchmark_runs import run_quick

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_quick("perkey_task", tmp_path_factory.mktemp("perkey"))


def test_the_record_names_its_command_and_machine(result: dict[str, Any]) -> None:
    assert result["command"].startswith("python -m benchmarks.perkey_task --quick")
    assert len(result["machine"]["load_average"]) == 3


def test_every_api_and_the_switchs_paths_are_timed_per_key(result: dict[str, Any]) -> None:
    plain = result["us_per_key"]["plain"]
    assert set(plain) == {"per_key", "vectorized", "pyspark pandas", "pyspark rows", OWN_FRAME}
    assert all(v > 0 for v in plain.values())


def test_the_switchs_pandas_path_is_profiled_by_what_it_does(result: dict[str, Any]) -> None:
    profile = result["us_per_key"]["profile"]  # sampled: a small part may miss a tiny run
    assert set(profile) <= {name for name, _ in CATEGORIES} | {REST}
    assert profile["the processor's output frame (pd.DataFrame in its own code)"] > 0
    assert [goal["benchmark"] for goal in result["goals"]] == [
        "the switch's processor step per key (pandas API, a few rows per key)"]


def test_every_wrapped_step_was_reached(result: dict[str, Any]) -> None:
    split = result["us_per_key"]["split"]
    assert set(split) == {label for label, _, _ in PHASES} | {OTHER}
    assert all(split[label] > 0 for label, _, _ in PHASES)
