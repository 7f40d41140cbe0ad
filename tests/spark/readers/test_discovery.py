"""PySpark finds the `dstl-state` source by listing `pyspark_*` packages on sys.path; an install
it cannot list, or a stale copy listed first, is named with its fix."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

import pyspark_dstl
from pyspark_dstl.spark.readers import discovery
from pyspark_dstl.spark.readers.discovery import (
    StaleInstallWarning,
    discovery_problem,
    warn_if_undiscoverable,
)

RUNNING = Path(pyspark_dstl.__file__).resolve().parent


def path_without_this_copy() -> list[str]:
    return [entry for entry in sys.path
            if not (Path(entry or ".") / "pyspark_dstl" / "__init__.py").exists()]


def test_the_copy_this_process_runs_is_the_one_the_lookup_finds() -> None:
    assert discovery_problem() is None


def test_an_install_the_lookup_cannot_list_is_named_with_the_strict_editable_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", path_without_this_copy())
    problem = discovery_problem()
    assert problem is not None
    assert problem.startswith(f"pyspark_dstl ({RUNNING}) is not in a directory PySpark's")
    assert "--config-settings editable_mode=strict" in problem


def test_a_stale_copy_earlier_on_the_path_is_named_with_both_locations(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stale = tmp_path / "old-site" / "pyspark_dstl"
    stale.mkdir(parents=True)
    (stale / "__init__.py").write_text("")
    monkeypatch.setattr(sys, "path", [str(stale.parent), *sys.path])
    problem = discovery_problem()
    assert problem is not None
    assert problem.startswith(f"PySpark's data source lookup finds pyspark_dstl at "
                              f"{stale.resolve()}, but this process runs {RUNNING}")
    assert "pip uninstall pyspark-dstl" in problem


def test_the_warning_comes_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", path_without_this_copy())
    monkeypatch.setattr(discovery, "_checked", False)
    with pytest.warns(StaleInstallWarning):
        warn_if_undiscoverable()
    with warnings.catch_warnings():
        warnings.simplefilter("error", StaleInstallWarning)
        warn_if_undiscoverable()
